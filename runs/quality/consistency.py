"""Checks that replay the audit's stored episodes once its runs have ended (services.audit_complete),
each in one environment sandbox (replay.Replayer), without running an agent:

- verifier consistency (`verifier.consistency`): the oracle's and the `random` probe's episodes, one per
  (task, seed), are replayed and their final state verified VERIFY_CALLS times; where the replay repeats
  the stored episode, the run's own verdict counts as one more call. An instance whose rewards differ is
  a verifier that disagrees with itself (it decides by chance or by the clock): re-scoring stored
  rollouts with it would change labels of identical replays, so re-verification by the version is
  refused (services.reverification_refusal).
- portability (`portability`): the `random` probe's episodes that repeat under the studio's own
  conventions (the replays above) are replayed again under another hash seed (PYTHONHASHSEED, hence the
  iteration order of sets of strings) and, apart, another time zone (TZ); a divergence from the stored
  episode is behaviour that changes outside the studio: not portable, with the first divergent step.

Determinism pairs compare steps under the same conventions; these compare verdicts, and conventions.
"""
from ..figures import RETURN_STATUSES
from ..models import AgentKind, Rollout
from .models import AuditRole
from .replay import Replayer

VERIFY_CALLS = 5
MAX_INSTANCES = 50  # replayed episodes per source (oracle, random probe), so a large audit stays cheap
MAX_LISTED = 20
OTHER_HASH_SEED = 1
# Pacific/Chatham (UTC+12:45, +13:45 in its summer), as a POSIX rule: no zoneinfo file needed in any backend.
CHATHAM = "<+1245>-12:45<+1345>,M9.5.0/2:45,M4.1.0/3:45"
# Each other convention: (what it changes, how the card says it, Replayer keywords).
CONVENTIONS = (
    ("hash order", f"PYTHONHASHSEED={OTHER_HASH_SEED} (the studio's is 0)", {"hash_seed": OTHER_HASH_SEED}),
    ("time zone", "TZ=Pacific/Chatham, UTC+12:45 (the studio's is UTC)", {"timezone": CHATHAM}),
)


def not_replayed(version) -> str:
    """Why the version's episodes are not replayed ("" when they are)."""
    if (version.manifest.get("kind") or "python") != "python":
        return "a browser version's episodes are not replayed"
    return ""


def replay_sources(audit) -> list[tuple[str, list[Rollout]]]:
    """(source, rollouts): the oracle's and the `random` probe's episodes that ran to their end (verify()
    answered), one per (task, seed), at most MAX_INSTANCES each."""
    sources = []
    for entry in audit.audit_runs.select_related("run__agent").order_by("id"):
        if entry.role == AuditRole.ORACLE:
            name = "oracle"
        elif entry.role == AuditRole.PROBE and entry.name == "random" and entry.run.agent.kind == AgentKind.RANDOM:
            name = "random"
        else:
            continue
        chosen, seen = [], set()
        rollouts = Rollout.objects.filter(run_id=entry.run_id, status__in=RETURN_STATUSES).select_related("run")
        for rollout in rollouts.order_by("task_id", "seed", "id"):
            if (rollout.task_id, rollout.seed) not in seen and len(chosen) < MAX_INSTANCES:
                seen.add((rollout.task_id, rollout.seed))
                chosen.append(rollout)
        sources.append((name, chosen))
    return sources


def distinct_verdicts(verdicts: list) -> list:
    """The different rewards among `verdicts`, in the order first given (None: no verifier)."""
    distinct = []
    for verdict in verdicts:
        value = None if verdict is None else round(float(verdict), 9)
        if value not in distinct:
            distinct.append(value)
    return distinct


def replay_checks(*, audit) -> tuple[dict, dict]:
    """(consistency, portability): the report's two documents (see the module's docstring)."""
    version = audit.environment_version
    why_not = not_replayed(version)
    consistency = {"applies": not why_not, "why_not": why_not, "calls": VERIFY_CALLS, "instances": 0,
                   "count": 0, "inconsistent": [], "errors": []}
    portability = {"applies": not why_not, "why_not": why_not, "instances": 0, "unrepeatable": 0, "conventions": []}
    if why_not:
        return consistency, portability
    repeated = []  # the random probe's episodes that the studio's own conventions repeat
    with Replayer(version) as replayer:
        for source, rollouts in replay_sources(audit):
            for rollout in rollouts:
                where = {"task_id": rollout.task_id, "seed": rollout.seed, "source": source, "rollout": rollout.pk}
                replayed = replayer.replay(rollout, verifies=VERIFY_CALLS)
                if replayed.error:
                    consistency["errors"].append({**where, "error": replayed.error})
                    continue
                consistency["instances"] += 1
                verdicts = list(replayed.verdicts)
                if replayed.diverged_at is None and rollout.verifier_reward is not None:
                    verdicts.append(rollout.verifier_reward)  # the run's own verdict of the same final state
                distinct = distinct_verdicts(verdicts)
                if len(distinct) > 1:
                    consistency["inconsistent"].append({**where, "verdicts": distinct, "calls": len(verdicts)})
                if source == "random":
                    if replayed.diverged_at is None:
                        repeated.append(rollout)
                    else:
                        portability["unrepeatable"] += 1  # the determinism pairs' finding, not portability's
    portability["instances"] = len(repeated)
    for name, says, keywords in CONVENTIONS:
        found = {"name": name, "says": says, "replayed": 0, "divergent": [], "errors": []}
        with Replayer(version, **keywords) as replayer:
            for rollout in repeated:
                where = {"task_id": rollout.task_id, "seed": rollout.seed, "rollout": rollout.pk}
                replayed = replayer.replay(rollout)
                found["replayed"] += 1
                if replayed.error:
                    found["errors"].append({**where, "error": replayed.error})
                elif replayed.diverged_at is not None:
                    found["divergent"].append({**where, "first_divergent_step": replayed.diverged_at,
                                               "reason": replayed.divergence})
        portability["conventions"].append(found)
    consistency["count"] = len(consistency["inconsistent"])
    consistency["inconsistent"] = consistency["inconsistent"][:MAX_LISTED]
    return consistency, portability
