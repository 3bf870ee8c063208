"""Memory admission of interactive episodes (plays, remote sessions, protocol episodes).

Each open episode holds a sandbox that may use up to its version's declared `memory_mb` (the cgroup
enforces that bound per episode). Counting episodes alone let one token hold 30 x 512 MB: here an
episode is admitted only while its team's open episodes, and its host's, declare no more than their
budgets (settings: EPISODES_TEAM_MEMORY_MB, EPISODE_HOST_MEMORY_MB; defaults from this machine).
"""
import collections
import os

from django.conf import settings

from ..models import Rollout, RolloutStatus
from ..sandbox.config import BROWSER_MIN_MEMORY_MB, SandboxLimits
from .setup import effective_limits


def machine_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 8192


def host_budget_mb() -> int:
    """What one episode host's open episodes may declare together (default: 3/4 of the machine)."""
    return int(getattr(settings, "EPISODE_HOST_MEMORY_MB", 0) or machine_memory_mb() * 3 // 4)


def team_budget_mb() -> int:
    """What one team's open episodes may declare together, over all hosts (default: half a host's)."""
    return int(getattr(settings, "EPISODES_TEAM_MEMORY_MB", 0) or host_budget_mb() // 2)


def declared_memory_mb(version) -> int:
    """The memory one episode of `version` may use: its [limits] memory_mb (or the sandbox default),
    at least what Chromium needs for a browser environment."""
    memory_mb = SandboxLimits.from_dict(effective_limits(version, None)).memory_mb
    if version.manifest.get("kind") == "browser":
        memory_mb = max(memory_mb, BROWSER_MIN_MEMORY_MB)
    return int(memory_mb)


def open_episodes(*, team_id: int, agent_kinds) -> list[tuple[Rollout, int]]:
    """The team's open episodes, newest first, each with the memory its version declares."""
    open_rollouts = (
        Rollout.objects.filter(team_id=team_id, status=RolloutStatus.RUNNING, run__agent__kind__in=agent_kinds)
        .select_related("run__environment_version__environment", "run__created_by", "run__agent")
        .order_by("-started_at", "-pk")
    )
    per_version: dict[int, int] = {}
    found = []
    for rollout in open_rollouts:
        version = rollout.run.environment_version
        if version.pk not in per_version:
            per_version[version.pk] = declared_memory_mb(version)
        found.append((rollout, per_version[version.pk]))
    return found


def opened_by(rollout: Rollout) -> str:
    creator = rollout.run.created_by
    return f"{creator.username if creator else 'unknown'} ({rollout.run.agent.name})"


def team_open_memory(*, team_id: int, agent_kinds) -> tuple[int, list[tuple[str, int, int]]]:
    """(MB the team's open episodes declare, [(who opened them, episodes, MB), ...] largest first)."""
    episodes: collections.Counter = collections.Counter()
    memory: collections.Counter = collections.Counter()
    for rollout, memory_mb in open_episodes(team_id=team_id, agent_kinds=agent_kinds):
        who = opened_by(rollout)
        episodes[who] += 1
        memory[who] += memory_mb
    by_whom = sorted(((who, episodes[who], memory[who]) for who in memory), key=lambda row: -row[2])
    return sum(memory.values()), by_whom


def over_team_budget(*, team_id: int, agent_kinds, asks_mb: int, retry_s: float) -> str:
    """Why an episode asking `asks_mb` more does not fit the team's budget ("" when it does)."""
    budget = team_budget_mb()
    used, by_whom = team_open_memory(team_id=team_id, agent_kinds=agent_kinds)
    if used + asks_mb <= budget:
        return ""
    whom = "; ".join(f"{who}: {count} episode{'s' if count != 1 else ''}, {mb:,} MB" for who, count, mb in by_whom[:5])
    return (
        f"Your team's open episodes declare {used:,} MB of memory ({whom or 'none'}); this one asks {asks_mb:,} MB more,"
        f" over the team's budget of {budget:,} MB (EPISODES_TEAM_MEMORY_MB). Close some episodes, or retry once"
        f" some end (idle ones close after {retry_s:g} s)."
    )


def open_episodes_summary(*, team_id: int, agent_kinds) -> dict:
    """What the page of open episodes and GET /api/v1/sessions show: each open episode with its
    declared memory, their total and the team's budget."""
    episodes = [
        {
            "rollout_id": rollout.pk, "run_id": rollout.run_id, "version": rollout.run.environment_version.label,
            "task_id": rollout.task_id, "seed": rollout.seed, "kind": rollout.run.agent.kind,
            "agent": rollout.run.agent.name, "opened_by": rollout.run.created_by.username if rollout.run.created_by else "",
            "memory_mb": memory_mb, "step_count": rollout.step_count, "started_at": rollout.started_at,
        }
        for rollout, memory_mb in open_episodes(team_id=team_id, agent_kinds=agent_kinds)
    ]
    return {"episodes": episodes, "memory_mb": sum(e["memory_mb"] for e in episodes), "budget_mb": team_budget_mb()}
