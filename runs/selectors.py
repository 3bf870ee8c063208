"""Reads of agents, runs, rollouts and steps, always scoped to one team by the caller's objects."""
from django.db.models import Avg, Count, OuterRef, Subquery
from django.shortcuts import get_object_or_404

from .models import FINISHED_ROLLOUT_STATUSES, Agent, RewardLabel, Rollout, RolloutStatus, Run, Step


def agents_for_team(*, team):
    return Agent.objects.filter(team=team).order_by("name")


def runs_for_team(*, team):
    return (
        Run.objects.filter(team=team)
        .select_related("environment_version__environment", "agent")
        .annotate(rollout_count=Count("rollouts"))
        .order_by("-created_at")
    )


def run_get(*, team, run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("environment_version__environment", "agent"), team=team, pk=run_id)


def rollout_get(*, team, rollout_id: int) -> Rollout:
    return get_object_or_404(
        Rollout.objects.select_related("run__environment_version__environment", "run__agent"), team=team, pk=rollout_id
    )


def rollout_get_for_reader(*, user, rollout_id: int, team=None) -> Rollout:
    """A rollout of one of the user's teams (of `team` only, for a token), or 404: another team's
    rollout looks like none."""
    rollouts = Rollout.objects.filter(team__memberships__user=user)
    if team is not None:
        rollouts = rollouts.filter(team=team)
    return get_object_or_404(rollouts, pk=rollout_id)


def rollout_steps(*, rollout, after_index: int | None = None):
    """Stored steps in order; `after_index` gives only the later ones (a late viewer catching up)."""
    steps = Step.objects.filter(rollout=rollout).order_by("index")
    if after_index is not None:
        steps = steps.filter(index__gt=after_index)
    return steps


def current_label(rollout) -> RewardLabel | None:
    return rollout.labels.order_by("-created_at", "-id").first()


def with_current_label(rollouts):
    """Annotate current_label_value/decision/source (the latest label) onto a rollout queryset."""
    latest = RewardLabel.objects.filter(rollout=OuterRef("pk"), step__isnull=True).order_by("-created_at", "-id")
    return rollouts.annotate(
        current_label_value=Subquery(latest.values("value")[:1]),
        current_label_decision=Subquery(latest.values("decision")[:1]),
        current_label_source=Subquery(latest.values("source")[:1]),
    )


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def run_summary(run: Run) -> dict:
    """Counts per status, progress, success rate, mean reward and steps, overall and by difficulty.

    Success rate and means count finished rollouts that were judged (succeeded or failed); errored,
    timed-out and cancelled ones are counted separately so a broken env does not read as a weak agent.
    """
    rows = list(run.rollouts.values("task_id", "status", "verifier_reward", "total_reward", "step_count"))
    difficulty_of = {str(task.get("id")): task.get("difficulty") for task in run.environment_version.tasks}

    def summarize(items) -> dict:
        counts = {status: 0 for status in RolloutStatus.values}
        for item in items:
            counts[item["status"]] += 1
        judged = [i for i in items if i["status"] in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED)]
        rewards = [i["verifier_reward"] if i["verifier_reward"] is not None else i["total_reward"] for i in judged]
        finished = [i for i in items if i["status"] in FINISHED_ROLLOUT_STATUSES]
        return {
            "total": len(items),
            "done": len(finished),
            "counts": counts,
            "success_rate": _rate(counts[RolloutStatus.SUCCEEDED], len(judged)),
            "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
            "mean_steps": round(sum(i["step_count"] for i in finished) / len(finished), 2) if finished else None,
        }

    summary = summarize(rows)
    summary["run_id"] = run.pk
    summary["status"] = run.status
    by_difficulty: dict[str, list] = {}
    for row in rows:
        by_difficulty.setdefault(str(difficulty_of.get(row["task_id"])), []).append(row)
    summary["by_difficulty"] = {key: summarize(items) for key, items in sorted(by_difficulty.items())}
    return summary


def compare_trajectories(a: Rollout, b: Rollout) -> dict:
    """Whether two rollouts took the same steps: actions, observations, rewards and flags, in order."""
    if a.initial_observation != b.initial_observation:
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
            if x != y:
                return {"identical": False, "first_divergence": left[0], "reason": f"{name} differs at step {left[0]}: {x!r} vs {y!r}"[:500]}
    return {"identical": True, "first_divergence": None, "reason": ""}


def _zip_longest(a, b):
    from itertools import zip_longest

    return zip_longest(a, b, fillvalue=None)


def mean_reward(run: Run) -> float | None:
    return run.rollouts.filter(status__in=FINISHED_ROLLOUT_STATUSES).aggregate(v=Avg("total_reward"))["v"]
