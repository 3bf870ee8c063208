"""Which tasks a training loop should practise next, from the agent's task statistics (RFC 013's
TaskSampler shape: sample, then outcomes update the statistics as rollouts finish).

- `uniform`: every training task alike.
- `learnable`: each task weighted by its posterior's mass in the learnable band [HARD, EASY]; tasks with
  few rollouts keep the prior's mass (0.8 for Beta(1, 1)), so they are explored; tasks confidently too
  easy or too hard are rarely drawn (a small floor keeps every task reachable).
- `ladder`: the lowest declared difficulty level whose tasks are not yet passed (pooled pass rate below
  EASY, or any with too few rollouts), its tasks uniformly: the ladder climbs as pass rates rise.
`cost_aware` divides each weight by the task's mean steps; `recent` weighs `learnable` by the statistics
that forget (each task's last ~RECENT_WINDOW rollouts, runs.curriculum.stats), so a task the agent has
since mastered stops being drawn. Deterministic given the seed and the statistics.
Tasks marked `split = "eval"` are never served (they are held out: environments.package.task_split).
"""
import numpy as np

from environments.package import task_split
from studio.errors import DomainError

from .stats import EASY, MIN_ROLLOUTS, TaskFigures

STRATEGIES = ("uniform", "learnable", "ladder")
MAX_K = 10_000
FLOOR = 0.01


class InvalidSample(DomainError):
    pass


def strategy_of(text) -> str | None:
    """'curriculum' or 'curriculum:STRATEGY' (as --tasks, the API's task_ids and New run's tasks take it):
    the strategy (learnable by default), or None for any other text."""
    if not isinstance(text, str) or not (text == "curriculum" or text.startswith("curriculum:")):
        return None
    strategy = text.partition(":")[2] or "learnable"
    if strategy not in STRATEGIES:
        raise InvalidSample(f"curriculum strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="task_ids")
    return strategy


def training_tasks(tasks: list[dict]) -> list[dict]:
    return [task for task in tasks if task_split(task) == "train"]


def _level(task: TaskFigures) -> float:
    try:
        return float(task.difficulty)
    except (TypeError, ValueError):
        return 0.0


def weights(figures: list[TaskFigures], strategy: str, *, cost_aware: bool = False, recent: bool = False) -> np.ndarray:
    if strategy == "uniform":
        w = np.ones(len(figures))
    elif strategy == "learnable":
        w = np.array([max(f.recent_learnable_mass if recent else f.learnable_mass, FLOOR) for f in figures])
    elif strategy == "ladder":
        levels = sorted({_level(f) for f in figures})
        current = levels[-1] if levels else 0.0
        for level in levels:
            at = [f for f in figures if _level(f) == level]
            done = sum(f.rollouts for f in at)
            passed = sum(f.successes for f in at)
            if any(f.rollouts < MIN_ROLLOUTS for f in at) or not done or passed / done < EASY:
                current = level
                break
        w = np.array([1.0 if _level(f) == current else 0.0 for f in figures])
    else:
        raise InvalidSample(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="strategy")
    if cost_aware:
        known = [f.mean_steps for f in figures if f.mean_steps]
        typical = float(np.median(known)) if known else 1.0
        w = w / np.array([max(f.mean_steps or typical, 1.0) for f in figures])
    return w


def sample(figures: list[TaskFigures], *, k: int, strategy: str, seed: int, cost_aware: bool = False,
           recent: bool = False) -> list[str]:
    if not isinstance(k, int) or isinstance(k, bool) or not 0 < k <= MAX_K:
        raise InvalidSample(f"k must be a whole number from 1 to {MAX_K:,}, not {k!r}", field="k")
    if strategy not in STRATEGIES:
        raise InvalidSample(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="strategy")
    if not figures:
        raise InvalidSample("this version has no training tasks to sample (every task is held out for eval)", field="version")
    w = weights(figures, strategy, cost_aware=cost_aware, recent=recent)
    chosen = np.random.default_rng(seed).choice(len(figures), size=k, replace=True, p=w / w.sum())
    return [figures[i].task_id for i in chosen]
