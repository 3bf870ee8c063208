"""Reads of agents, runs, rollouts and steps, always scoped to one team by the caller's objects."""
import datetime
from dataclasses import dataclass

from django.db.models import Count, Q, Subquery
from django.shortcuts import get_object_or_404
from django.utils import timezone

from environments.models import Environment

from environments.selectors import without_version_content

from studio.errors import DomainError
from studio.models import Membership

from . import events, figures
from .artifacts import arrays_fingerprint
from .labels import current_labels_of_outer_rollout, own_layer
from .models import (
    Agent, AgentKind, AgentSecret, LabelSource, RewardLabel, Rollout, RolloutStatus, Run, RunPurpose, RunStatus, Step,
)


def agents_for_team(*, team):
    return Agent.objects.filter(team=team).order_by("name")


def agent_get(*, team, agent_id: int) -> Agent:
    """The team's agent, or 404: another team's agent looks like none."""
    return get_object_or_404(Agent, team=team, pk=agent_id)


def agents_to_run(*, team):
    """The agents New run offers besides "random": the team's own, not the built-in random one, people or remotes."""
    return agents_for_team(team=team).exclude(kind=AgentKind.RANDOM, name="random").exclude(kind__in=[AgentKind.HUMAN, AgentKind.REMOTE])


def agents_with_run_counts(*, team):
    return agents_for_team(team=team).annotate(run_count=Count("runs"))


def agent_has_api_key(*, agent) -> bool:
    return AgentSecret.objects.filter(agent=agent).exclude(api_key="").exists()


def agent_by_reference(*, team, reference) -> Agent | None:
    """The team's agent a run names: by id (a number) or by name ("random" included, when the team has
    an agent of that name); None when neither matches."""
    agents = Agent.objects.filter(team=team)
    text = str(reference).strip()
    if isinstance(reference, int) or text.isdigit():
        found = agents.filter(pk=int(text)).first()
        if found is not None:
            return found
    return agents.filter(name=text).first()


class InvalidRunFilter(DomainError):
    pass


ALL_PURPOSES = "all"
RUN_FILTER_KEYS = ("purpose", "agent", "version", "status", "created_from", "created_to", "q")


@dataclass(frozen=True)
class RunFilters:
    """What the runs list (page and API) narrows to. `purpose` None means every purpose; the default is
    evaluations, so audits, sessions and plays are a filter away."""

    purpose: str | None = RunPurpose.EVALUATION
    agent_id: int | None = None
    environment_slug: str | None = None
    version_number: int | None = None
    status: str | None = None
    created_from: datetime.date | None = None
    created_to: datetime.date | None = None  # inclusive
    q: str = ""


def _filter_date(text: str, field: str) -> datetime.date | None:
    if not text:
        return None
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise InvalidRunFilter(f"{field} must be a date as YYYY-MM-DD, not {text[:40]!r}.", field=field) from None


def run_filters_parse(*, team, params) -> RunFilters:
    """The run filters of query parameters (`purpose`, `agent` (name or id), `version` ("slug" or "slug@N"),
    `status`, `created_from`/`created_to` (dates), `q`); InvalidRunFilter names the one at fault."""
    text = {key: str(params.get(key) or "").strip() for key in RUN_FILTER_KEYS}
    purpose = text["purpose"] or RunPurpose.EVALUATION
    if purpose != ALL_PURPOSES and purpose not in RunPurpose.values:
        raise InvalidRunFilter(f"Unknown purpose {purpose[:40]!r}; purposes are {', '.join(RunPurpose.values)} or all.", field="purpose")
    if text["status"] and text["status"] not in RunStatus.values:
        raise InvalidRunFilter(f"Unknown status {text['status'][:40]!r}; statuses are {', '.join(RunStatus.values)}.", field="status")
    agent_id = None
    if text["agent"]:
        agent = agent_by_reference(team=team, reference=text["agent"])
        if agent is None:
            raise InvalidRunFilter(f"No agent {text['agent'][:80]!r} in this team.", field="agent")
        agent_id = agent.pk
    slug, number = None, None
    if text["version"]:
        slug, at, digits = text["version"].partition("@")
        if at and not digits.isdigit():
            raise InvalidRunFilter(f"A version is slug or slug@N, not {text['version'][:80]!r}.", field="version")
        if not Environment.objects.filter(team=team, slug=slug).exists():
            raise InvalidRunFilter(f"No environment {slug[:80]!r} in this team.", field="version")
        number = int(digits) if at else None
    created_from, created_to = _filter_date(text["created_from"], "created_from"), _filter_date(text["created_to"], "created_to")
    if created_from and created_to and created_to < created_from:
        raise InvalidRunFilter("created_to is before created_from.", field="created_to")
    return RunFilters(purpose=None if purpose == ALL_PURPOSES else purpose, agent_id=agent_id, environment_slug=slug,
                      version_number=number, status=text["status"] or None, created_from=created_from,
                      created_to=created_to, q=text["q"][:200])


def _day_start(day: datetime.date) -> datetime.datetime:
    return timezone.make_aware(datetime.datetime.combine(day, datetime.time.min))


def _runs_narrowed(runs, *, team, filters: RunFilters, purpose: bool = True):
    """`runs` narrowed by the filters (by purpose too unless `purpose=False`). Each filter reads an index of
    runs (runs.models.Run.Meta); search matches a run number, or an agent or environment by name."""
    if purpose and filters.purpose:
        runs = runs.filter(purpose=filters.purpose)
    if filters.agent_id is not None:
        runs = runs.filter(agent_id=filters.agent_id)
    if filters.environment_slug:
        runs = runs.filter(environment_version__environment__slug=filters.environment_slug)
        if filters.version_number is not None:
            runs = runs.filter(environment_version__number=filters.version_number)
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.created_from:
        runs = runs.filter(created_at__gte=_day_start(filters.created_from))
    if filters.created_to:
        runs = runs.filter(created_at__lt=_day_start(filters.created_to + datetime.timedelta(days=1)))
    if filters.q:
        words = Q(agent_id__in=Agent.objects.filter(team=team, name__icontains=filters.q).values("pk")) | Q(
            environment_version__environment_id__in=Environment.objects.filter(team=team).filter(
                Q(slug__icontains=filters.q) | Q(name__icontains=filters.q)).values("pk"))
        if filters.q.lstrip("#").isdigit() and len(filters.q) < 19:
            words |= Q(pk=int(filters.q.lstrip("#")))
        runs = runs.filter(words)
    return runs


def runs_filtered(*, team, filters: RunFilters | None = None):
    """The team's runs the filters keep (evaluations when none are given), newest first."""
    return _runs_narrowed(runs_of_team(team=team), team=team, filters=filters or RunFilters()).order_by("-created_at", "-id")


def run_purpose_counts(*, team, filters: RunFilters | None = None) -> dict[str, int]:
    """How many of the team's runs each purpose has (every purpose named, "all" their sum), narrowed by the
    filters other than purpose."""
    runs = _runs_narrowed(Run.objects.filter(team=team), team=team, filters=filters or RunFilters(), purpose=False)
    counts = dict.fromkeys(RunPurpose.values, 0)
    counts.update(dict(runs.order_by().values_list("purpose").annotate(n=Count("id")).values_list("purpose", "n")))
    counts[ALL_PURPOSES] = sum(counts.values())
    return counts


def runs_with_counts(*, team, filters: RunFilters | None = None):
    """The team's runs the filters keep (evaluations by default), newest first, each with the run figures'
    counts (runs.figures), for lists."""
    return figures.with_run_counts(runs_filtered(team=team, filters=filters).select_related("created_by"))


def runs_of_team(*, team):
    """The team's runs with version (without its files and tasks) and agent, unordered."""
    return without_version_content(
        Run.objects.filter(team=team).select_related("environment_version__environment", "agent"), "environment_version")


def run_created_at(*, team, run_id: int):
    """When the team's run was created, or None when the team has no such run (a page cursor)."""
    return Run.objects.filter(team=team, pk=run_id).values_list("created_at", flat=True).first()


def recent_runs(*, team, most: int = 50, purpose: str | None = RunPurpose.EVALUATION) -> list[Run]:
    runs = Run.objects.filter(team=team)
    if purpose:
        runs = runs.filter(purpose=purpose)
    return list(runs.order_by("-id")[:most])


def run_team_for_reader(*, run_id: int, user, api_token) -> Run | None:
    """The run (its team only) if it is in one of the caller's teams (a token's: its own team), else None."""
    return Run.objects.filter(pk=run_id, team_id__in=reader_team_ids(user=user, api_token=api_token)).only("team_id").first()


def reader_team_ids(*, user, api_token):
    """The caller's teams (a token's: its own team only)."""
    if api_token is not None:
        return [api_token.team_id]
    return Membership.objects.filter(user=user).values("team_id")


# What a rollout's status message carries (events.rollout_status), read by hand: the ORM's compilation
# of the same query cost more CPU than the query on every handshake (bench/bench_viewers.py).
STATUS_COLUMNS = ("id", "run_id", "team_id", "task_id", "seed", "status", "step_count", "total_reward", "verifier_reward",
                  "verifier_reason", "error", "end_reason")


def rollout_status_for_reader(*, rollout_id: int, user=None, api_token=None) -> Rollout | None:
    """The rollout (the fields of its status only), if it is in one of the caller's teams when a caller is
    given; one database hop for check and read."""
    sql = f"SELECT {', '.join(STATUS_COLUMNS)} FROM {Rollout._meta.db_table} WHERE id = %s"
    params = [rollout_id]
    if api_token is not None:
        sql += " AND team_id = %s"
        params.append(api_token.team_id)
    elif user is not None:
        sql += f" AND team_id IN (SELECT team_id FROM {Membership._meta.db_table} WHERE user_id = %s)"
        params.append(user.pk)
    return next(iter(Rollout.objects.raw(sql, params)), None)


def run_get(*, team, run_id: int) -> Run:
    """The team's run with its version (without the version's files and tasks) and agent, or 404."""
    return get_object_or_404(runs_of_team(team=team), pk=run_id)


def runs_by_ids(*, team, text: str, most: int = 6) -> list[Run]:
    """The team's runs named in '12,15' (or '12 15'), in that order; ValueError says what is wrong."""
    ids = []
    for part in (text or "").replace(" ", ",").split(","):
        if not part:
            continue
        if not part.isdigit():
            raise ValueError(f"{part!r} is not a run number")
        if int(part) not in ids:
            ids.append(int(part))
    if not 2 <= len(ids) <= most:
        raise ValueError(f"Choose from 2 to {most} runs to compare.")
    found = {run.pk: run for run in runs_of_team(team=team).filter(pk__in=ids)}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise ValueError(f"No run {', '.join(missing)} in this team.")
    return [found[i] for i in ids]


def rollout_get(*, team, rollout_id: int) -> Rollout:
    """The team's rollout with its run, version (without files and tasks), agent and the rollout it
    reran, or 404: another team's rollout looks like none."""
    rollouts = Rollout.objects.select_related("run__environment_version__environment", "run__agent", "rerun_of", "team")
    return get_object_or_404(without_version_content(rollouts, "run__environment_version"), team=team, pk=rollout_id)


def rollout_get_for_reader(*, user, rollout_id: int, team=None) -> Rollout:
    """A rollout of one of the user's teams (of `team` only, for a token), or 404: another team's
    rollout looks like none."""
    rollouts = Rollout.objects.filter(team__memberships__user=user)
    if team is not None:
        rollouts = rollouts.filter(team=team)
    return get_object_or_404(rollouts, pk=rollout_id)


def rollouts_of_version(*, team, version):
    return Rollout.objects.filter(team=team, run__environment_version=version)


def rollouts_of_version_number(*, team, slug: str, number: int):
    return Rollout.objects.filter(team=team, run__environment_version__environment__slug=slug,
                                  run__environment_version__number=number)


def step_at(*, rollout, index: int) -> Step | None:
    return Step.objects.filter(rollout=rollout, index=index).first()


def running_now(*, run) -> list[dict]:
    """The run's running rollouts, by id, each with its latest stored step as viewers get it (None before
    the first). Running rollouts hold a worker or host slot each, so there are few of them."""
    running = list(Rollout.objects.filter(run=run, status=RolloutStatus.RUNNING).order_by("id").values_list("id", "step_count"))
    latest = Q(pk__in=[])
    for rollout_id, step_count in running:
        if step_count:
            latest |= Q(rollout_id=rollout_id, index=step_count - 1)
    rows = {row["rollout_id"]: row for row in Step.objects.filter(latest).values("rollout_id", *events.STEP_FIELDS, "artifact")}
    return [
        {"rollout_id": rollout_id, "step": events.step_json(rows[rollout_id], rollout_id=rollout_id) if rollout_id in rows else None}
        for rollout_id, _ in running
    ]


def rollout_steps(*, rollout, after_index: int | None = None):
    """Stored steps in order; `after_index` gives only the later ones (a late viewer catching up)."""
    steps = Step.objects.filter(rollout=rollout).order_by("index")
    if after_index is not None:
        steps = steps.filter(index__gt=after_index)
    return steps


def current_label(rollout) -> RewardLabel | None:
    """The rollout's current label (runs.labels): its latest human decision, else its own verifier's newest."""
    labels = rollout.labels.filter(step__isnull=True).filter(own_layer(run_version=rollout.run.environment_version_id))
    return labels.order_by("-created_at", "-id").filter(source=LabelSource.HUMAN).first() or labels.order_by("-created_at", "-id").first()


def with_current_label(rollouts):
    """Annotate current_label_value/decision/source (runs.labels: the latest human decision, else the newest
    label of the run's own verifier) onto a rollout queryset."""
    latest = current_labels_of_outer_rollout()
    return rollouts.annotate(
        current_label_value=Subquery(latest.values("value")[:1]),
        current_label_decision=Subquery(latest.values("decision")[:1]),
        current_label_source=Subquery(latest.values("source")[:1]),
    )


def compare_trajectories(a: Rollout, b: Rollout) -> dict:
    """Whether two rollouts took the same steps: actions, observations, rewards and flags, in order.
    Stored arrays compare by content (their digests), never by the name of their file."""
    if arrays_fingerprint(a.initial_observation) != arrays_fingerprint(b.initial_observation):
        return {"identical": False, "first_divergence": 0, "reason": "the reset observations differ"}
    fields = ("index", "action", "observation", "reward", "terminated", "truncated", "info")
    steps_a = Step.objects.filter(rollout=a).order_by("index").values_list(*fields).iterator()
    steps_b = Step.objects.filter(rollout=b).order_by("index").values_list(*fields).iterator()
    position = 0
    for position, (left, right) in enumerate(_zip_longest(steps_a, steps_b)):
        if left is None or right is None:
            shorter = "first" if left is None else "second"
            return {"identical": False, "first_divergence": position, "reason": f"the {shorter} rollout ends at step {position}"}
        for name, x, y in zip(fields[1:], left[1:], right[1:]):
            if name == "observation":
                x, y = arrays_fingerprint(x), arrays_fingerprint(y)
            if x != y:
                return {"identical": False, "first_divergence": left[0], "reason": f"{name} differs at step {left[0]}: {x!r} vs {y!r}"[:500]}
    return {"identical": True, "first_divergence": None, "reason": ""}


def _zip_longest(a, b):
    from itertools import zip_longest

    return zip_longest(a, b, fillvalue=None)

