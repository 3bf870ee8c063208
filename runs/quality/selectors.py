"""Reads of the quality lab, team-scoped by the caller's objects."""
from django.shortcuts import get_object_or_404

from studio.errors import DomainError

from ..figures import DONE_STATUSES
from ..models import Agent, Rollout
from . import report as figures
from .paired import paired_figures
from .models import Audit, AuditStatus, Reverification


def audit_get(*, team, audit_id: int) -> Audit:
    return get_object_or_404(Audit.objects.select_related("environment_version__environment"), team=team, pk=audit_id)


def reverification_get(*, team, reverification_id: int) -> Reverification:
    return get_object_or_404(Reverification.objects.select_related("environment_version__environment", "source"),
                             team=team, pk=reverification_id)


def latest_reverification(*, version) -> Reverification | None:
    """The newest re-verification by `version`'s verifier."""
    return Reverification.objects.filter(environment_version=version).select_related("source").first()


def replayable_rollouts(*, version):
    """Finished rollouts of a version with steps to replay."""
    return (
        Rollout.objects.filter(run__environment_version=version, status__in=DONE_STATUSES)
        .select_related("run").order_by("id")
    )


def reverification_preview(*, version, source) -> dict:
    """What re-verifying `source`'s stored rollouts with `version`'s verifier would do, before anything is
    queued (runs.labels): each replayable rollout may get a new verifier label (an upper bound: a replay that
    does not repeat its episode is skipped); the human-decided ones keep their human decision as the current
    label, exactly counted from their review state. Only a re-verification by the rollouts' own version can
    change a current label, that of an undecided rollout whose replay scores differently (again at most).
    Two counts over the source's rollouts, whatever their number of labels."""
    rollouts = replayable_rollouts(version=source)
    total = rollouts.count()
    decided = rollouts.filter(review_state__deciders__gt=0).count()
    own = version.pk == source.pk
    current_may_change = total - decided if own else 0
    if own:
        detail = (f"At most {current_may_change} current label{'' if current_may_change == 1 else 's'} may change: the"
                  " undecided rollouts whose replay scores differently.")
    else:
        detail = (f"{version.label}'s labels are kept beside {source.label}'s own verifier's and change no current label;"
                  " a rollout whose human decision they contradict is marked disagreement.")
    return {
        "version": version.label, "source": source.label, "labels_may_change": total, "human_decided": decided,
        "current_may_change": current_may_change, "upper_bound": True,
        "summary": f"{total} label{'' if total == 1 else 's'} would change, {decided} of them human-decided; those stay.",
        "detail": detail,
    }


def audits_of(*, version):
    return Audit.objects.filter(environment_version=version).order_by("-created_at", "-id")


def latest_audit(*, version) -> Audit | None:
    return audits_of(version=version).first()


def latest_report(*, version) -> dict | None:
    """The newest audit of the version that has a report."""
    audit = audits_of(version=version).exclude(report__isnull=True).first()
    return audit.report if audit else None


def audit_card(audit) -> dict:
    """What the card shows of an audit: its lines and, for a report, how it compares with the parent's."""
    version = audit.environment_version if audit else None
    report = audit.report if audit else None
    parent_report = latest_report(version=version.parent) if version and version.parent_id else None
    return {
        "audit": audit,
        "lines": (report or {}).get("lines", []),
        "since_parent": figures.compared_with_parent(report, parent_report) if report else [],
        "running": bool(audit and audit.status == AuditStatus.RUNNING),
    }


class InvalidComparison(DomainError):
    pass


def ab_rows(*, runs=None, version=None, agent=None) -> list[dict]:
    """Done rollouts (id, task_id, seed, repeat, status, verifier_reward) of some runs, or of one agent on one version."""
    rollouts = Rollout.objects.filter(status__in=DONE_STATUSES)
    rollouts = rollouts.filter(run__in=runs) if runs is not None else rollouts.filter(run__environment_version=version, run__agent=agent)
    return list(rollouts.order_by("id").values("id", "task_id", "seed", "repeat", "status", "verifier_reward"))


def ab_compare(*, team, a: str = "", b: str = "", agent: str = "", agent_b: str = "", runs: str = "") -> dict:
    """A/B for the page, the API and `compare_ab`: two runs (`runs` "12,15"), one agent on versions a and b,
    or two agents (`agent`, `agent_b`) on version a (and b, when given). `paired`: instance by instance
    (paired.paired_figures), what the page leads with; `result`: the unpaired figures over the tasks both
    ran (report.ab_figures)."""
    from environments.selectors import version_by_label
    from runs.selectors import runs_by_ids

    if runs:
        try:
            run_a, run_b = runs_by_ids(team=team, text=runs, most=2)
        except ValueError as exc:
            raise InvalidComparison(str(exc), field="runs") from None
        labels = (f"run #{run_a.pk} ({run_a.environment_version.label}, {run_a.agent.name})",
                  f"run #{run_b.pk} ({run_b.environment_version.label}, {run_b.agent.name})")
        a_rows, b_rows = ab_rows(runs=[run_a]), ab_rows(runs=[run_b])
    else:
        b = b or (a if agent_b else "")
        for name, value in (("a", a), ("b", b), ("agent", agent)):
            if not value:
                raise InvalidComparison(f"Give {name} (versions as slug@N and an agent name), or two runs.", field=name)
        version_a = version_by_label(team=team, label=a)
        version_b = version_by_label(team=team, label=b)
        agents = []
        for field, name in (("agent", agent), ("agent_b", agent_b or agent)):
            found = Agent.objects.filter(team=team, name=name).first()
            if found is None:
                raise InvalidComparison(f"No agent named {name!r} in this team.", field=field)
            agents.append(found)
        labels = (f"{version_a.label} ({agents[0].name})", f"{version_b.label} ({agents[1].name})")
        if version_a.pk == version_b.pk and agents[0].pk == agents[1].pk:
            raise InvalidComparison("A and B are the same version and agent: change b or agent_b.", field="b")
        a_rows, b_rows = ab_rows(version=version_a, agent=agents[0]), ab_rows(version=version_b, agent=agents[1])
    result = figures.ab_figures(a_rows=a_rows, b_rows=b_rows)
    if not result["tasks"]:
        raise InvalidComparison("The two sides have no finished rollouts on the same tasks.", field="runs" if runs else "b")
    return {"a_label": labels[0], "b_label": labels[1], "paired": paired_figures(a_rows=a_rows, b_rows=b_rows),
            "result": result}
