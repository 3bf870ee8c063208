"""State changes of the quality lab: start, complete and cancel an audit; re-verify stored rollouts.

An audit queues ordinary runs (one Celery task per rollout); when the last of them ends, a hook
(hooks.py) enqueues `complete_audit`, which computes the report (report.py) and stores it once.
"""
import ast
import logging
from pathlib import Path

from django.db import IntegrityError, transaction
from django.utils import timezone

from studio.errors import Conflict, DomainError

from .. import services as run_services
from ..models import AgentKind, LabelDecision, LabelSource, RewardLabel, Rollout, RunStatus
from . import report as figures
from .models import Audit, AuditRole, AuditRun, AuditStatus

logger = logging.getLogger(__name__)

PROBES_DIR = Path(__file__).resolve().parent / "probes"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
MAX_AUDIT_SEEDS = 20
MAX_GOLDEN_CASES = 200
SUCCESS_WORDS = ("correct", "success", "solved", "pass", "done", "right", "win", "complete", "verified")


class InvalidAudit(DomainError):
    pass


class AuditRunning(Conflict):
    pass


# -- start ----------------------------------------------------------------------------------------


def success_words(version) -> list[str]:
    """Words the environment's own code uses for success (string literals of its .py files)."""
    words = set()
    for path, text in version.files.items():
        if not path.endswith(".py") or path.startswith("probes/") or path == oracle_path(version):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for word in node.value.replace("!", " ").replace(".", " ").split():
                    if any(stem in word.lower() for stem in SUCCESS_WORDS) and len(word) <= 30 and word.isprintable():
                        words.add(word)
    return sorted(words)[:40]


def env_interface(version) -> dict:
    """What an agent can send: the action space and tools the environment shows after resetting its
    first task (seed 0), so probes speak its language. Empty when it cannot be learnt (browser
    environments, a failing reset): the probes then try text and common shapes."""
    from django.conf import settings

    from environments.dependencies.services import DependenciesNotReady

    from ..episodes.setup import effective_limits, version_sandbox_config
    from ..sandbox import SandboxError, SandboxLimits
    from ..sandbox.backends import sandbox_for

    if (version.manifest.get("kind") or "python") != "python" or not version.tasks:
        return {}
    try:
        config = version_sandbox_config(version)  # a plugin environment loads in its dependency environment
    except DependenciesNotReady:
        return {}
    sandbox = sandbox_for(settings.SANDBOX_BACKEND, config)
    try:
        sandbox.start(version.files, mode="env", entrypoint=version.manifest["entrypoint"],
                      limits=SandboxLimits.from_dict(effective_limits(version, None)))
        sandbox.reset(version.tasks[0], 0)
        return {"action_space": sandbox.action_space, "tools": sandbox.tools or []}
    except SandboxError:
        return {}
    finally:
        sandbox.close()


def probe_code(name: str, version, interface: dict | None = None) -> str:
    """A built-in probe's code with what it knows of this version filled in."""
    code = (PROBES_DIR / f"{name}.py").read_text(encoding="utf-8")
    interface = env_interface(version) if interface is None else interface
    code = code.replace("SPACE = None", f"SPACE = {interface.get('action_space')!r}", 1)
    code = code.replace("TOOL_SPECS = []", f"TOOL_SPECS = {interface.get('tools') or []!r}", 1)
    if name == "claim":
        code = code.replace("WORDS = []", f"WORDS = {success_words(version)!r}", 1)
    return code


def author_probes(version) -> dict[str, str]:
    """The package's own probe agents: probes/NAME.py -> {NAME: code}."""
    return {
        Path(path).stem: text for path, text in sorted(version.files.items())
        if path.startswith("probes/") and path.endswith(".py") and path.count("/") == 1
    }


def oracle_path(version) -> str:
    """The package's reference solution: oracle.py, or the file `[quality] oracle` names."""
    return str((version.manifest.get("quality") or {}).get("oracle") or "oracle.py")


def checked_seeds(seeds) -> list[int]:
    seeds = list(seeds)
    if not seeds:
        raise InvalidAudit("Give at least one seed.", field="seeds")
    if len(seeds) > MAX_AUDIT_SEEDS:
        raise InvalidAudit(f"An audit takes at most {MAX_AUDIT_SEEDS} seeds, not {len(seeds)}.", field="seeds")
    return seeds


def audit_start(*, version, actor, seeds=DEFAULT_SEEDS) -> Audit:
    """Queue the audit's runs: each probe, the oracle (when the package has oracle.py) and the
    determinism pairs (the random agent twice per task and seed)."""
    team = version.environment.team
    seeds = checked_seeds(seeds)
    if not version.tasks:
        raise InvalidAudit(f"{version.label} has no tasks to audit: add tasks.jsonl lines and commit a version.", field="version")
    slug = version.environment.slug
    random_agent = run_services.agent_get_or_create(team=team, actor=actor, name="random", kind=AgentKind.RANDOM)
    plan = []
    interface = env_interface(version)
    for name in figures.BUILTIN_PROBES:
        if name == "random":
            plan.append((AuditRole.PROBE, name, random_agent, 1))
        else:
            agent = run_services.agent_get_or_create(team=team, actor=actor, name=f"probe-{name}", kind=AgentKind.SCRIPTED,
                                                     code=probe_code(name, version, interface))
            plan.append((AuditRole.PROBE, name, agent, 1))
    for name, code in author_probes(version).items():
        agent = run_services.agent_get_or_create(team=team, actor=actor, name=f"{slug}-probe-{name}", kind=AgentKind.SCRIPTED, code=code)
        plan.append((AuditRole.PROBE, name, agent, 1))
    oracle, oracle_file = None, oracle_path(version)
    if oracle_file in version.files:
        try:
            oracle = run_services.agent_get_or_create(team=team, actor=actor, name=f"{slug}-oracle", kind=AgentKind.SCRIPTED,
                                                      code=version.files[oracle_file])
        except run_services.InvalidAgent as exc:
            raise InvalidAudit(f"{oracle_file}: {exc.message}", field="version") from None
        plan.append((AuditRole.ORACLE, "oracle", oracle, 1))
    # The random agent draws its actions from the rollout's seed: a deterministic agent that needs no
    # agent sandbox, so the pairs cost half of a scripted agent's.
    plan.append((AuditRole.DETERMINISM, "determinism", random_agent, 2))
    try:
        with transaction.atomic():
            audit = Audit.objects.create(team=team, environment_version=version, seeds=seeds, created_by=actor)
            for role, name, agent, repeats in plan:
                run = run_services.run_create(team=team, actor=actor, version=version, agent=agent, seeds=seeds, repeats=repeats)
                AuditRun.objects.create(audit=audit, run=run, role=role, name=name)
    except IntegrityError:
        running = Audit.objects.filter(environment_version=version, status=AuditStatus.RUNNING).first()
        raise AuditRunning(
            f"An audit of {version.label} is already running (audit {running.pk if running else '?'}); wait for it or cancel it.",
            field="version",
        ) from None
    return audit


# -- complete, cancel -----------------------------------------------------------------------------


def audit_complete(*, audit_id: int) -> str:
    """Store the report once every run of the audit has ended. Idempotent: an ended audit, or one
    with runs still going, is left alone (the last run's end enqueues this again)."""
    audit = Audit.objects.select_related("environment_version__environment").filter(pk=audit_id).first()
    if audit is None or audit.is_over:
        return "nothing to do"
    runs = list(audit.audit_runs.select_related("run"))
    if any(entry.run.status not in (RunStatus.FINISHED, RunStatus.CANCELLED) for entry in runs):
        return "runs still going"
    cancelled = [entry for entry in runs if entry.run.status == RunStatus.CANCELLED]
    status, message, report = AuditStatus.CANCELLED, "", None
    if cancelled:
        names = ", ".join(f"run {entry.run_id} ({entry.name})" for entry in cancelled)
        message = f"Cancelled: {names} did not finish, so the audit has no report."
    else:
        try:
            report = figures.audit_report(audit=audit, regression=verifier_regression(version=audit.environment_version))
            status = AuditStatus.FLAGGED if report["status"] == "flagged" else AuditStatus.PASSED
        except Exception as exc:  # noqa: BLE001 - an audit must end with a readable state, never stay running
            logger.exception("computing the report of audit %s failed", audit.pk)
            status, message = AuditStatus.FAILED, f"The report could not be computed: {exc!r}"
    with transaction.atomic():
        written = Audit.objects.filter(pk=audit.pk, status=AuditStatus.RUNNING).update(
            status=status, report=report, message=message, finished_at=timezone.now(),
        )
    return status if written else "ended elsewhere"


def audit_cancel(*, audit: Audit, actor) -> Audit:
    """Stop the audit's runs; the audit ends cancelled with no report."""
    with transaction.atomic():
        audit = Audit.objects.select_for_update().get(pk=audit.pk)
        if audit.is_over:
            return audit
        who = getattr(actor, "username", "") or "someone"
        audit.status, audit.finished_at = AuditStatus.CANCELLED, timezone.now()
        audit.message = f"Cancelled by {who}; no report was stored."
        audit.save(update_fields=["status", "finished_at", "message"])
        for entry in audit.audit_runs.select_related("run"):
            run_services.run_cancel(run=entry.run, actor=actor)
    return audit


# -- verifier regression and re-verification ------------------------------------------------------


def golden_cases(*, version):
    """Rollouts of earlier versions of the environment with a human decision (latest per rollout)."""
    labels = (
        RewardLabel.objects.filter(
            source=LabelSource.HUMAN, step__isnull=True,
            decision__in=[LabelDecision.APPROVED, LabelDecision.REJECTED, LabelDecision.OVERRIDDEN],
            rollout__run__environment_version__environment=version.environment,
            rollout__run__environment_version__number__lt=version.number,
        )
        .select_related("rollout__run")
        .order_by("rollout_id", "-created_at", "-id")
        .distinct("rollout_id")
    )
    return list(labels[:MAX_GOLDEN_CASES])


def human_pass(label: RewardLabel) -> bool:
    """What the human said the outcome was: approved and overridden values as given; a rejection
    says the verifier's judgement was wrong."""
    if label.decision == LabelDecision.REJECTED:
        if label.value is not None:
            return label.value > 0
        return not ((label.rollout.verifier_reward or 0.0) > 0)
    value = label.value if label.value is not None else label.rollout.verifier_reward
    return (value or 0.0) > 0


def verifier_regression(*, version) -> dict | None:
    """Replay every golden case on `version`; the new verifier's reward against the human label."""
    from .replay import Replayer

    labels = golden_cases(version=version)
    if not labels:
        return None
    cases = []
    with Replayer(version) as replayer:
        for label in labels:
            replayed = replayer.replay(label.rollout)
            cases.append({"rollout": label.rollout_id, "task_id": label.rollout.task_id, "seed": label.rollout.seed,
                          "decision": label.decision, "human_pass": human_pass(label), "new_reward": replayed.reward,
                          "note": replayed.error or replayed.reason})
    return figures.regression_figures(cases)


def rollouts_reverify(*, version, rollouts, actor=None) -> dict:
    """Re-score stored rollouts with `version`'s verifier by replaying their actions: each replay that
    repeats its episode adds a new `verifier` label (append-only); the others are listed, unlabelled."""
    from .replay import Replayer

    audit = latest_audit(version=version)
    if audit is None or audit.report is None:
        raise InvalidAudit(f"Audit {version.label} first: re-verification needs episodes that repeat.", field="version")
    if audit.report["determinism"]["divergent"]:
        raise InvalidAudit(f"Episodes of {version.label} do not repeat (its audit found divergent pairs): a replay would not"
                           " reproduce what the agent saw.", field="version")
    labelled, skipped = 0, []
    with Replayer(version) as replayer:
        for rollout in rollouts:
            replayed = replayer.replay(rollout)
            if replayed.reward is None or replayed.error or (replayed.diverged_at is not None):
                why = replayed.error or (f"diverged at step {replayed.diverged_at}" if replayed.diverged_at is not None
                                         else replayed.reason or "no reward")
                skipped.append({"rollout": rollout.pk, "reason": why})
                continue
            RewardLabel.objects.create(
                team_id=rollout.team_id, rollout=rollout, source=LabelSource.VERIFIER, value=replayed.reward,
                decision=LabelDecision.PROPOSED, rationale=f"re-verified by {version.label}: {replayed.reason}"[:2000],
            )
            labelled += 1
    return {"version": version.label, "labelled": labelled, "skipped": skipped}


def latest_audit(*, version):
    return Audit.objects.filter(environment_version=version).order_by("-created_at", "-id").first()


def replayable_rollouts(*, version):
    """Finished rollouts of a version with steps to replay."""
    return (
        Rollout.objects.filter(run__environment_version=version, status__in=figures.DONE_STATUSES)
        .select_related("run").order_by("id")
    )
