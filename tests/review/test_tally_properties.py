"""The tallies the database's triggers keep (runs/sql/: RunTally, AgreementTally, BlindTally, ReviewState)
equal what the Python definitions compute from the same history, over random histories: rollouts that
start, progress, finish by their version's success rule (runs.figures.rollout_succeeded), end otherwise,
are requeued, moved or deleted; verifier proposals and human decisions (approvals, rejections, overrides,
corrections, step labels) appended over time, judged with Cohen's kappa (runs.review.selectors.cohen_kappa)."""
import json
from collections import Counter

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments import services as env_services
from runs.figures import DONE_STATUSES, RETURN_STATUSES, rollout_succeeded, run_figures
from runs.models import (
    LabelDecision, LabelSource, ReviewState, RewardLabel, Rollout, RolloutStatus, Run, RunTally, Step,
)
from runs import labels as layers
from runs.review import selectors, services
from runs.services import agent_get_or_create
from studio.errors import DomainError

from tests.review.conftest import ENV_PY

EXAMPLES = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# Binary fractions: sums of them are exact, so tallies compare with ==.
REWARDS = st.sampled_from([0.0, 1.0, 0.5, -1.0, 0.25, 2.0])
ROLLOUTS = 4


class _Rollback(Exception):
    """Leaves an example's atomic block so that everything it wrote is rolled back."""


def _each_example_rolled_back(body):
    try:
        with transaction.atomic():
            body()
            raise _Rollback
    except _Rollback:
        pass


def _version(team, actor, slug, success=None):
    toml = f'name = "{slug}"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 5\n'
    if success:
        toml += "\n[success]\n" + "".join(f"{key} = {value}\n" for key, value in success.items())
    files = {"environment.toml": toml, "env.py": ENV_PY, "tasks.jsonl": json.dumps({"id": "t1"}) + "\n"}
    env = env_services.environment_create(team=team, actor=actor, name=slug, slug=slug, files=files)
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


# -- review: agreement, blind review and review state ------------------------------------------------------


def _contribution(labels: list[RewardLabel], *, own_version_id) -> dict:
    """One rollout's agreement counts from its rollout-level labels, oldest first, by the definitions of
    selectors.agreement: each reviewer's latest decision is a rating, judged against the proposal (the newest
    label of the run's own verifier, runs.labels; pass = value > 0); approved keeps the verifier's verdict,
    rejected flips it, overridden is its value. Disagreement and the per-version counts by runs.labels."""
    humans = [label for label in labels if label.source == LabelSource.HUMAN]
    proposal = layers.proposal_of(labels, own_version_id=own_version_id)
    latest = {label.reviewer_id: label for label in humans}  # oldest first, so the last one wins
    ratings = []
    if proposal:
        v = proposal.value is not None and proposal.value > 0
        for label in latest.values():
            if label.decision == LabelDecision.APPROVED:
                h = v
            elif label.decision == LabelDecision.REJECTED:
                h = not v
            else:
                h = label.value is not None and label.value > 0
            ratings.append((v, h))
    n, p = len(ratings), sum(1 for _, h in ratings if h)
    decisions = Counter(label.decision for label in humans)
    return {
        "reviewed": int(bool(humans)), "decisions": len(humans), "approved": decisions[LabelDecision.APPROVED],
        "rejected": decisions[LabelDecision.REJECTED], "overridden": decisions[LabelDecision.OVERRIDDEN],
        "ratings": ratings, "multi": int(n > 1), "pairs": n * (n - 1) // 2 if n > 1 else 0,
        "agreeing": p * (p - 1) // 2 + (n - p) * (n - p - 1) // 2 if n > 1 else 0,
        "deciders": {label.reviewer_id for label in humans if label.reviewer_id is not None},
        "proposal": proposal,
        "disagreements": int(layers.in_disagreement(labels, own_version_id=own_version_id)),
        "by_verifier": layers.verifier_counts(labels, own_version_id=own_version_id),
    }


def _expected_by_verifier(labelled: list[dict], seen: list[dict], *, names: dict, own_version_id) -> list[dict]:
    """Per verifier version: rollouts labelled (all of them), compared/agreeing/disagreeing (those seen)."""
    sums = {}
    for c, counted in [(c, False) for c in labelled] + [(c, True) for c in seen]:
        for version_id, counts in c["by_verifier"].items():
            row = sums.setdefault(version_id, Counter())
            if counted:
                row.update({key: counts[key] for key in ("compared", "agreeing", "disagreements")})
            else:
                row["labelled"] += counts["labelled"]
    rows = sorted(sums.items(), key=lambda item: (item[0] != own_version_id, names[item[0]]))
    return [{"version": names[version_id], "own": version_id == own_version_id, "labelled": row["labelled"],
             "compared": row["compared"], "agreeing": row["agreeing"], "disagreements": row["disagreements"],
             "agreement_rate": round(row["agreeing"] / row["compared"], 4) if row["compared"] else None}
            for version_id, row in rows]


def _expected_agreement(contributions: list[dict], *, rollouts: int, by_verifier: list[dict]) -> dict:
    total = Counter()
    ratings = []
    for c in contributions:
        total.update({key: c[key] for key in ("reviewed", "decisions", "approved", "rejected", "overridden", "multi",
                                              "pairs", "agreeing", "disagreements")})
        ratings += c["ratings"]
    count = Counter(ratings)
    tt, tf, ft, ff = count[(True, True)], count[(True, False)], count[(False, True)], count[(False, False)]
    changed, decisions = total["overridden"] + total["rejected"], total["decisions"]
    override_rate = changed / decisions if decisions else None
    kappa = selectors.cohen_kappa(ratings)
    return {
        "rollouts": rollouts, "rollouts_reviewed": total["reviewed"], "human_decisions": decisions,
        "approved": total["approved"], "rejected": total["rejected"], "overridden": total["overridden"],
        "override_rate": None if override_rate is None else round(override_rate, 4),
        "verifier_human": {
            "compared": len(ratings),
            "confusion": {"verifier_pass_human_pass": tt, "verifier_pass_human_fail": tf,
                          "verifier_fail_human_pass": ft, "verifier_fail_human_fail": ff},
            "agreement_rate": round((tt + ff) / len(ratings), 4) if ratings else None,
            "kappa": None if kappa is None else round(kappa, 4),
        },
        "human_human": {"rollouts": total["multi"], "pairs": total["pairs"],
                        "agreement_rate": round(total["agreeing"] / total["pairs"], 4) if total["pairs"] else None},
        "tags": {},
        "verifier_often_overridden": bool(decisions >= selectors.FLAG_MIN_DECISIONS and override_rate is not None
                                          and override_rate >= selectors.FLAG_OVERRIDE_RATE),
        "disagreements": total["disagreements"],
        "by_verifier": by_verifier,
    }


label_events = st.lists(
    st.one_of(
        st.tuples(st.just("human"), st.integers(0, ROLLOUTS - 1), st.integers(0, 2),
                  st.sampled_from(["approved", "rejected", "overridden"]), st.one_of(st.none(), REWARDS)),
        # A later verifier label: the run's own verifier again, or another version's (a re-verification).
        st.tuples(st.just("verifier"), st.integers(0, ROLLOUTS - 1), st.one_of(st.none(), REWARDS), st.booleans()),
        st.tuples(st.just("step"), st.integers(0, ROLLOUTS - 1), st.integers(0, 2), REWARDS),
    ),
    min_size=8,
    max_size=30,
)


@EXAMPLES
@given(
    reviews_required=st.integers(1, 3),
    proposals=st.lists(st.one_of(st.just("none"), st.none(), REWARDS), min_size=1, max_size=ROLLOUTS),
    events=label_events,
)
def test_agreement_and_review_state_tallies_equal_the_python_definitions_over_random_label_histories(
        team, owner, reviewer, second_reviewer, version, reviews_required, proposals, events):
    cast = [owner, reviewer, second_reviewer]
    agent = agent_get_or_create(team=team, actor=owner, name="random", kind="random")

    def history():
        other = _version(team, owner, "counter-other")  # its verifier re-verifies
        names = {version.pk: version.label, other.pk: other.label}
        run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0],
                                 reviews_required=reviews_required, status="finished", created_by=owner)
        rollouts = [Rollout.objects.create(team=team, run=run, task_id="t1", seed=i, status=RolloutStatus.SUCCEEDED)
                    for i in range(len(proposals))]
        steps = [Step.objects.create(rollout=r, index=0) for r in rollouts]
        for rollout, proposal in zip(rollouts, proposals):
            if proposal != "none":  # "none": a rollout the verifier never proposed for
                RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.VERIFIER, value=proposal,
                                           decision=LabelDecision.PROPOSED)
        for event in events:
            i = event[1] % len(rollouts)
            try:
                if event[0] == "human":
                    services.label_decide(rollout=rollouts[i], actor=cast[event[2]], decision=event[3], value=event[4],
                                          rationale="because")
                elif event[0] == "verifier":
                    RewardLabel.objects.create(team=team, rollout=rollouts[i], source=LabelSource.VERIFIER,
                                               value=event[2], decision=LabelDecision.PROPOSED,
                                               verifier_version=other if event[3] else None)
                else:
                    services.label_decide(rollout=rollouts[i], actor=cast[event[2]], decision="overridden",
                                          value=event[3], rationale="a step", step=steps[i])
            except DomainError:
                pass  # refused by the service's rules (already decided, nothing to approve): not in the history

        contributions = {}
        for rollout in rollouts:
            labels = list(RewardLabel.objects.filter(rollout=rollout, step__isnull=True).order_by("created_at", "id"))
            contributions[rollout.pk] = _contribution(labels, own_version_id=version.pk)
        every = list(contributions.values())
        expected = _expected_agreement(every, rollouts=len(rollouts), by_verifier=_expected_by_verifier(
            every, every, names=names, own_version_id=version.pk))
        assert selectors.agreement(run=run) == expected
        assert selectors.agreement(version=version) == expected

        k = max(1, reviews_required)
        for viewer in cast:
            # Blind review: a rollout under way (0 < deciders < K) that the viewer has not decided is left out.
            seen = [c for c in contributions.values() if not (0 < len(c["deciders"]) < k and viewer.pk not in c["deciders"])]
            assert selectors.agreement(run=run, viewer=viewer) == _expected_agreement(
                seen, rollouts=len(rollouts), by_verifier=_expected_by_verifier(every, seen, names=names, own_version_id=version.pk))

        states = {s.rollout_id: s for s in ReviewState.objects.filter(rollout__in=rollouts)}
        for rollout in rollouts:
            c, state = contributions[rollout.pk], states.get(rollout.pk)
            if c["proposal"] is None and not c["deciders"] and not c["by_verifier"]:  # no rollout-level label
                assert state is None
                continue
            proposal = c["proposal"]
            assert (state.proposed_reward, state.has_proposal, state.deciders, set(state.decider_ids), state.open,
                    state.disagreement) == (
                proposal.value if proposal else None, proposal is not None, len(c["deciders"]), c["deciders"],
                proposal is not None and len(c["deciders"]) < k, bool(c["disagreements"]),
            )

    _each_example_rolled_back(history)


# -- runs: RunTally and the success rule -----------------------------------------------------------------

SUCCESS_RULES = {"default": None, "return": {"return_at_least": 0.5}, "verifier": {"verifier_at_least": 1.0}}

created_rollouts = st.lists(
    st.tuples(st.just("create"), st.just(0), st.integers(0, 1), st.sampled_from(["t1", "t2", "t3"]), st.just(0),
              st.just(0.0), st.none(), st.just("")),
    min_size=2, max_size=8,
)
# Each event: what happens, to which rollout (an index into those there), and the values it may need.
# Episodes mostly run: started, stepped, ended by verify() (None: no verifier reward) or by a fault.
_KINDS = ["create", "start", "progress", "progress", "finish", "finish", "finish", "finish", "end", "requeue", "move",
          "delete"]
rollout_events = st.lists(
    st.tuples(
        st.sampled_from(_KINDS), st.integers(0, 2**16), st.integers(0, 1), st.sampled_from(["t1", "t2", "t3"]),
        st.integers(1, 4), REWARDS, st.one_of(st.none(), REWARDS),
        st.sampled_from([RolloutStatus.ERRORED, RolloutStatus.TIMED_OUT, RolloutStatus.CANCELLED]),
    ),
    min_size=15,
    max_size=40,
)


@pytest.fixture
def versions(team, owner):
    return {name: _version(team, owner, f"tally-{name}", rule) for name, rule in SUCCESS_RULES.items()}


@EXAMPLES
@given(rule=st.sampled_from(sorted(SUCCESS_RULES)), created=created_rollouts, events=rollout_events,
       drop_second_run=st.booleans())
def test_run_tallies_equal_the_python_definitions_over_random_rollout_histories(team, owner, versions, rule, created,
                                                                                events, drop_second_run):
    agent = agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    success = SUCCESS_RULES[rule]

    def history():
        runs = [Run.objects.create(team=team, environment_version=versions[rule], agent=agent, task_ids=["t1"],
                                   seeds=[0], created_by=owner) for _ in range(2)]
        # What each rollout is, kept beside the database: the reference the tallies are compared with.
        model: dict[int, dict] = {}
        for kind, index, run_index, task_id, steps, reward, verifier, fault in created + events:
            if kind == "create":
                rollout = Rollout.objects.create(team=team, run=runs[run_index], task_id=task_id, seed=len(model))
                model[rollout.pk] = {"run": runs[run_index].pk, "task_id": task_id, "status": RolloutStatus.QUEUED,
                                     "total_reward": 0.0, "verifier_reward": None, "step_count": 0}
                continue
            if not model:
                continue
            pk = sorted(model)[index % len(model)]
            m = model[pk]
            if kind == "start" and m["status"] == RolloutStatus.QUEUED:
                change = {"status": RolloutStatus.RUNNING}
            elif kind == "progress" and m["status"] == RolloutStatus.RUNNING:
                change = {"step_count": m["step_count"] + steps, "total_reward": m["total_reward"] + reward}
            elif kind == "finish" and m["status"] in (RolloutStatus.QUEUED, RolloutStatus.RUNNING):
                if m["status"] == RolloutStatus.QUEUED:
                    Rollout.objects.filter(pk=pk).update(status=RolloutStatus.RUNNING)
                steps, total = m["step_count"] + steps, m["total_reward"] + reward
                Rollout.objects.filter(pk=pk).update(step_count=steps, total_reward=total)
                succeeded = rollout_succeeded(success, verifier_reward=verifier, total_reward=total)
                change = {"status": RolloutStatus.SUCCEEDED if succeeded else RolloutStatus.FAILED,
                          "verifier_reward": verifier, "step_count": steps, "total_reward": total}
            elif kind == "end" and m["status"] in (RolloutStatus.QUEUED, RolloutStatus.RUNNING):
                change = {"status": fault}
            elif kind == "requeue" and m["status"] == RolloutStatus.RUNNING:  # its worker was lost
                change = {"status": RolloutStatus.QUEUED, "total_reward": 0.0, "verifier_reward": None, "step_count": 0}
            elif kind == "move":
                change = {"task_id": task_id}
            elif kind == "delete":
                Rollout.objects.filter(pk=pk).delete()
                del model[pk]
                continue
            else:
                continue
            Rollout.objects.filter(pk=pk).update(**change)
            m.update(change)
        if drop_second_run:
            runs[1].delete()
            model = {pk: m for pk, m in model.items() if m["run"] != runs[1].pk}
            assert not RunTally.objects.filter(run_id=runs[1].pk).exists()
            runs = runs[:1]

        for run in runs:
            mine = [m for m in model.values() if m["run"] == run.pk]
            by_task = {}
            for m in mine:
                t = by_task.setdefault(m["task_id"], Counter(total=0))
                done, ran = m["status"] in DONE_STATUSES, m["status"] in RETURN_STATUSES
                t.update({"total": 1, f"n_{m['status']}": 1, "return_n": int(ran),
                          "return_sum": m["total_reward"] if ran else 0.0,
                          "verifier_n": int(done and m["verifier_reward"] is not None),
                          "verifier_sum": m["verifier_reward"] if done and m["verifier_reward"] is not None else 0.0,
                          "steps_sum": m["step_count"] if done else 0})
            columns = ["total", *(f"n_{s}" for s in RolloutStatus.values), "return_n", "return_sum", "verifier_n",
                       "verifier_sum", "steps_sum"]
            rows = RunTally.objects.filter(run=run).order_by().values("task_id").annotate(**{c: Sum(c) for c in columns})
            tallied = {row["task_id"]: {c: row[c] for c in columns} for row in rows if row["total"]}
            assert tallied == {task: {c: t[c] for c in columns} for task, t in by_task.items()}

            # The success rule: the figures' succeeded are the episodes that ran to their end and pass the rule.
            figures = run_figures(run)
            done = [m for m in mine if m["status"] in DONE_STATUSES]
            succeeded = sum(1 for m in done if m["status"] in RETURN_STATUSES and rollout_succeeded(
                success, verifier_reward=m["verifier_reward"], total_reward=m["total_reward"]))
            assert (figures["total"], figures["done"], figures["succeeded"]) == (len(mine), len(done), succeeded)
            assert figures["success_rate"] == (round(succeeded / len(done), 4) if done else None)

    _each_example_rolled_back(history)
