"""Episodes: one service for the life of an episode (set-up, start, step, finish, fail, step writing),
driven by Celery workers (engine.py) and by episode hosts for interactive drivers."""
from .service import (
    Episode,
    EpisodeFault,
    EpisodeOutcome,
    EpisodeOver,
    browser_sandbox,
    close_browser_pool,
    describe_fault,
    episode_fail,
    episode_finish,
    episode_flush,
    episode_interrupt,
    episode_reject_action,
    episode_sandbox,
    episode_start,
    episode_step,
    fault_of,
    public_facts,
    rollout_end,
    rollout_finish,
)
from .setup import (
    DEFAULT_VERIFY_TIMEOUT_S,
    RUN_LIMIT_KEYS,
    EpisodeSetup,
    agent_view_of,
    effective_limits,
    episode_setup,
    task_of,
)
from .writer import FLUSH_EVERY_S, FLUSH_EVERY_STEPS, Heartbeat, LostOwnership, StepWriter

__all__ = [
    "DEFAULT_VERIFY_TIMEOUT_S", "FLUSH_EVERY_S", "FLUSH_EVERY_STEPS", "RUN_LIMIT_KEYS", "Episode", "EpisodeFault",
    "EpisodeOutcome", "EpisodeOver", "EpisodeSetup", "Heartbeat", "LostOwnership", "StepWriter", "agent_view_of",
    "browser_sandbox", "close_browser_pool", "describe_fault", "effective_limits", "episode_fail", "episode_finish",
    "episode_flush", "episode_interrupt", "episode_reject_action", "episode_sandbox", "episode_setup", "episode_start", "episode_step",
    "fault_of", "public_facts", "rollout_end", "rollout_finish", "task_of",
]
