"""Reads of agents, runs, rollouts and steps, always scoped to one team by the caller's objects."""
from django.db.models import Count, OuterRef, Subquery
from django.shortcuts import get_object_or_404

from environments.selectors import without_version_content

from .artifacts import arrays_fingerprint
from .models import Agent, RewardLabel, Rollout, Run, Step


def agents_for_team(*, team):
    return Agent.objects.filter(team=team).order_by("name")


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


def runs_for_team(*, team):
    return without_version_content(
        Run.objects.filter(team=team)
        .select_related("environment_version__environment", "agent")
        .annotate(rollout_count=Count("rollouts"))
        .order_by("-created_at"), "environment_version",
    )


def run_get(*, team, run_id: int) -> Run:
    """The team's run with its version (without the version's files and tasks) and agent, or 404."""
    runs = without_version_content(Run.objects.select_related("environment_version__environment", "agent"), "environment_version")
    return get_object_or_404(runs, team=team, pk=run_id)


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
    runs = without_version_content(Run.objects.select_related("environment_version__environment", "agent"), "environment_version")
    found = {run.pk: run for run in runs.filter(team=team, pk__in=ids)}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise ValueError(f"No run {', '.join(missing)} in this team.")
    return [found[i] for i in ids]


def rollout_get(*, team, rollout_id: int) -> Rollout:
    rollouts = Rollout.objects.select_related("run__environment_version__environment", "run__agent")
    return get_object_or_404(without_version_content(rollouts, "run__environment_version"), team=team, pk=rollout_id)


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

