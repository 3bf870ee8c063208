"""State changes of the quality lab: start, complete and cancel an audit; re-verify stored rollouts.

An audit queues ordinary runs (one Celery task per rollout); when the last of them ends, a hook
(hooks.py) enqueues `complete_audit`, which computes the report (report.py) and stores it once.
"""
import ast
import logging
import re
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from studio.celery import task_send_on_commit
from studio.storage_quota import storage_quota_check

from studio.errors import Conflict, DomainError

from .. import services as run_services
from ..agents import oracle_path
from ..models import AgentKind, LabelDecision, LabelSource, RewardLabel, RunPurpose, RunStatus
from . import report as figures
from .answers import answer_probes
from .consistency import replay_checks
from .probes import tamper
from .models import Audit, AuditRole, AuditRun, AuditStatus, Reverification, ReverificationStatus
from .selectors import replayable_rollouts

logger = logging.getLogger(__name__)

PROBES_DIR = Path(__file__).resolve().parent / "probes"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
MAX_AUDIT_SEEDS = 20
MAX_GOLDEN_CASES = 200
# Re-verification: how often the job's progress is written, and how many skipped rollouts it lists.
PROGRESS_EVERY = 10
# The re-verification task, sent by name (runs/quality/tasks.py registers it).
EXECUTE_REVERIFICATION = "runs.quality.tasks.execute_reverification"
MAX_SKIPPED_LISTED = 200
SUCCESS_WORDS = ("correct", "success", "solved", "pass", "done", "right", "win", "complete", "verified")


class InvalidAudit(DomainError):
    pass


class AuditRunning(Conflict):
    pass


# -- start ----------------------------------------------------------------------------------------


def code_strings(version):
    """Each string literal of the package's own Python code (its oracle and probes aside; a file that does
    not parse is skipped): what probes learn the environment's words and paths from."""
    for path, text in version.files.items():
        if not path.endswith(".py") or path.startswith("probes/") or path == oracle_path(version):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.value


def success_words(version) -> list[str]:
    """Words the environment's own code uses for success (string literals of its .py files)."""
    words = set()
    for literal in code_strings(version):
        for word in literal.replace("!", " ").replace(".", " ").split():
            if any(stem in word.lower() for stem in SUCCESS_WORDS) and len(word) <= 30 and word.isprintable():
                words.add(word)
    return sorted(words)[:40]


def env_interface(version) -> dict:
    """What an agent can send: the action space and tools the environment shows after resetting its
    first task (seed 0), so probes speak its language. Empty when it cannot be learnt (browser
    environments, whose actions are the SDK's page actions; a failing reset): the probes then try
    text and common shapes."""
    from environments.dependencies.services import DependenciesNotReady

    from ..episodes.setup import effective_limits
    from ..sandbox import SandboxError, SandboxLimits
    from .replay import version_sandbox

    if (version.manifest.get("kind") or "python") != "python" or not version.tasks:
        return {}
    try:
        sandbox = version_sandbox(version)
    except DependenciesNotReady:
        return {}
    try:
        sandbox.start(version.files, mode="env", entrypoint=version.manifest["entrypoint"],
                      limits=SandboxLimits.from_dict(effective_limits(version, None)))
        sandbox.reset(version.tasks[0], 0)
        return {"action_space": sandbox.action_space, "tools": sandbox.tools or []}
    except SandboxError:
        return {}
    finally:
        sandbox.close()


# A string literal of the package's code that names a file: a relative or absolute path with an extension
# or a folder, no spaces (what a verifier might read back).
PATH_LITERAL = re.compile(r"^(?:/|\.{0,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:txt|json|jsonl|xml|log|out|csv|ya?ml|md|html|toml|ini|flag|done)$")


def path_literals(version) -> list[str]:
    """Path-like string literals of the package's own code (its oracle and probes aside): where a verifier
    may look for a report the agent could forge (the `tamper` probe writes to each)."""
    paths = {literal for literal in code_strings(version) if len(literal) <= 200 and PATH_LITERAL.match(literal)}
    return sorted(paths)[:40]


def tamper_applies(interface: dict) -> bool:
    """Whether the environment offers a tool that writes files (the `tamper` probe has something to forge with)."""
    return bool(tamper.writers(interface.get("tools") or []))


def probe_code(name: str, version, interface: dict | None = None) -> str:
    """A built-in probe's code with what it knows of this version filled in."""
    code = (PROBES_DIR / f"{name}.py").read_text(encoding="utf-8")
    interface = env_interface(version) if interface is None else interface
    code = code.replace('KIND = "python"', f"KIND = {version.manifest.get('kind') or 'python'!r}", 1)
    code = code.replace("SPACE = None", f"SPACE = {interface.get('action_space')!r}", 1)
    code = code.replace("TOOL_SPECS = []", f"TOOL_SPECS = {interface.get('tools') or []!r}", 1)
    if name == "claim":
        code = code.replace("WORDS = []", f"WORDS = {success_words(version)!r}", 1)
    if name == "tamper":
        code = code.replace("PATHS = []", f"PATHS = {path_literals(version)!r}", 1)
    return code


def author_probes(version) -> dict[str, str]:
    """The package's own probe agents: probes/NAME.py -> {NAME: code}."""
    return {
        Path(path).stem: text for path, text in sorted(version.files.items())
        if path.startswith("probes/") and path.endswith(".py") and path.count("/") == 1
    }


def checked_seeds(seeds) -> list[int]:
    seeds = list(seeds)
    if not seeds:
        raise InvalidAudit("Give at least one seed.", field="seeds")
    if len(seeds) > MAX_AUDIT_SEEDS:
        raise InvalidAudit(f"An audit takes at most {MAX_AUDIT_SEEDS} seeds, not {len(seeds)}.", field="seeds")
    return seeds


def audit_start(*, version, actor, seeds=DEFAULT_SEEDS) -> Audit:
    """Queue the audit's runs: each probe, the oracle (when the package has oracle.py) and the
    determinism pairs (the random agent once more per task and seed, beside the `random` probe's run)."""
    team = version.environment.team
    seeds = checked_seeds(seeds)
    if not version.tasks:
        raise InvalidAudit(f"{version.label} has no tasks to audit: add tasks.jsonl lines and commit a version.", field="version")
    slug = version.environment.slug
    random_agent = run_services.agent_get_or_create(team=team, actor=actor, name="random", kind=AgentKind.RANDOM)
    plan = []
    interface = env_interface(version)
    for name in figures.BUILTIN_PROBES:
        if name == "tamper" and not tamper_applies(interface):
            continue  # nothing in the environment writes a file: there is no verdict to forge
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
    # The random agent draws its actions from the rollout's seed, so it is a deterministic agent: each
    # episode of the `random` probe is run once more, and the two make a determinism pair.
    plan.append((AuditRole.DETERMINISM, "determinism", random_agent, 1))
    storage_quota_check(team_id=team.pk, what="Audit")
    try:
        with transaction.atomic():
            audit = Audit.objects.create(team=team, environment_version=version, seeds=seeds, created_by=actor,
                                         interface={"tools": interface.get("tools") or [],
                                                    "action_space": interface.get("action_space")})
            for role, name, agent, repeats in plan:
                run = run_services.run_create(team=team, actor=actor, version=version, agent=agent, seeds=seeds, repeats=repeats,
                                               purpose=RunPurpose.AUDIT)
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
    """Store the report once every run of the audit has ended, after playing its answer probes
    (answers.py: replays in one environment sandbox, which need the oracle's episodes) and replaying its
    episodes for verifier consistency and portability (consistency.py). Idempotent: an
    ended audit, or one with runs still going, is left alone (the last run's end enqueues this again)."""
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
            consistency, portability = replay_checks(audit=audit)
            report = figures.audit_report(audit=audit, regression=verifier_regression(version=audit.environment_version),
                                          answers=answer_probes(audit=audit), consistency=consistency, portability=portability)
            status = AuditStatus(report["status"])
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


def reverification_refusal(*, version) -> str:
    """Why `version`'s verifier cannot re-score by replay ("" when it can): its episodes must repeat, and
    its verifier must give one verdict per final state (the audit's `verifier.consistency`)."""
    audit = latest_audit(version=version)
    if audit is None or audit.report is None:
        return f"Audit {version.label} first: re-verification needs episodes that repeat."
    determinism = audit.report.get("determinism") or {}
    if determinism.get("divergent"):
        return (f"Episodes of {version.label} do not repeat (its audit found divergent pairs): a replay would not"
                " reproduce what the agent saw.")
    if not determinism.get("pairs"):
        return f"The audit of {version.label} finished no determinism pair: audit it again before re-verifying."
    consistency = audit.report.get("consistency") or {}
    if consistency.get("inconsistent"):
        first = consistency["inconsistent"][0]
        said = ", ".join("none" if verdict is None else f"{verdict:g}" for verdict in first["verdicts"])
        return (f"The verifier of {version.label} disagrees with itself (its audit judged the same final state"
                f" differently in {consistency.get('count') or len(consistency['inconsistent'])} instance(s), e.g. task"
                f" {first['task_id']} seed {first['seed']}: {said}): re-scoring would change labels of identical replays.")
    return ""


def rollouts_reverify(*, version, rollouts, progress=None) -> tuple[list[RewardLabel], list[dict]]:
    """Re-score stored rollouts with `version`'s verifier by replaying their actions: a new `verifier`
    label (unsaved) for each replay that repeats its episode, and the others listed with the reason.
    `progress(replayed)` is called every PROGRESS_EVERY rollouts."""
    from .replay import Replayer

    if refusal := reverification_refusal(version=version):
        raise InvalidAudit(refusal, field="version")
    labels, skipped = [], []
    with Replayer(version) as replayer:
        for count, rollout in enumerate(rollouts, 1):
            replayed = replayer.replay(rollout)
            if replayed.reward is None or replayed.error or (replayed.diverged_at is not None):
                why = replayed.error or (f"diverged at step {replayed.diverged_at}" if replayed.diverged_at is not None
                                         else replayed.reason or "no reward")
                skipped.append({"rollout": rollout.pk, "reason": why})
            else:
                # A label of `version`'s verifier: beside the human decision and the run's own verifier's
                # labels, current only over its own version's rollouts without a human decision (runs.labels).
                labels.append(RewardLabel(
                    team_id=rollout.team_id, rollout_id=rollout.pk, source=LabelSource.VERIFIER, value=replayed.reward,
                    verifier_version_id=version.pk, decision=LabelDecision.PROPOSED, rationale=f"re-verified by {version.label}: {replayed.reason}"[:2000],
                ))
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(count)
    return labels, skipped


def reverification_check(*, version, source) -> None:
    """Raise InvalidAudit when `version`'s verifier may not re-score `source`'s rollouts."""
    if source.environment_id != version.environment_id:
        raise InvalidAudit("Re-verify rollouts of the same environment.", field="source")
    if refusal := reverification_refusal(version=version):
        raise InvalidAudit(refusal, field="version")


def reverification_start(*, version, source, actor) -> Reverification:
    """Queue a background re-verification of `source`'s stored rollouts by `version`'s verifier (its
    preview, selectors.reverification_preview, says beforehand what it may change)."""
    reverification_check(version=version, source=source)
    with transaction.atomic():
        job = Reverification.objects.create(
            team=version.environment.team, environment_version=version, source=source, created_by=actor,
            total=replayable_rollouts(version=source).count(),
        )
        task_send_on_commit(EXECUTE_REVERIFICATION, job.pk)
    return job


def reverification_execute(*, reverification_id: int) -> str:
    """Replay the job's rollouts and write their labels together with its end, in one transaction.
    Idempotent: an ended job is left alone; a redelivered one (its worker died) starts over, and the
    older attempt's final write finds itself fenced out. Any failure ends it failed, with no label."""
    claimed = Reverification.objects.filter(
        pk=reverification_id, status__in=[ReverificationStatus.QUEUED, ReverificationStatus.RUNNING],
    ).update(status=ReverificationStatus.RUNNING, attempts=F("attempts") + 1, replayed=0)
    if not claimed:
        return "nothing to do"
    job = Reverification.objects.select_related("environment_version__environment", "source").get(pk=reverification_id)
    mine = Reverification.objects.filter(pk=job.pk, attempts=job.attempts, status=ReverificationStatus.RUNNING)

    def progress(replayed):
        mine.update(replayed=min(replayed, job.total))

    try:
        rollouts = list(replayable_rollouts(version=job.source)[:job.total]) if job.total else []
        labels, skipped = rollouts_reverify(version=job.environment_version, rollouts=rollouts, progress=progress)
        with transaction.atomic():
            if not mine.update(status=ReverificationStatus.DONE, replayed=len(rollouts), labelled=len(labels),
                               skipped=skipped[:MAX_SKIPPED_LISTED], finished_at=timezone.now(),
                               message=f"{len(labels)} new verifier label(s), {len(skipped)} rollout(s) skipped."):
                return "taken over"
            RewardLabel.objects.bulk_create(labels, batch_size=1000)
        return ReverificationStatus.DONE
    except Exception as exc:  # noqa: BLE001 - the job must end with a readable state, never stay running
        logger.exception("re-verification %s failed", job.pk)
        message = exc.message if isinstance(exc, DomainError) else f"The re-verification failed: {exc!r}"
        mine.update(status=ReverificationStatus.FAILED, finished_at=timezone.now(), labelled=0,
                    message=f"{message} No label was written."[:2000])
        return ReverificationStatus.FAILED


def latest_audit(*, version):
    return Audit.objects.filter(environment_version=version).order_by("-created_at", "-id").first()


