"""Task statistics per agent: kept as rollouts finish, read in O(tasks), with a Beta posterior per task.

A rollout counts when it is done (succeeded or failed: its episode ran to its end) and its run is an
evaluation or a session (never an audit's probes, a re-verification or a play). A success is what
runs/figures.py counts as one (the status the episode service set by the version's success rule).
"""
from dataclasses import dataclass

import numpy as np
from django.db.models import Sum

from environments.package import task_split

from ..models import RolloutStatus, Run, RunPurpose
from .models import TaskStat

COUNTED_PURPOSES = (RunPurpose.EVALUATION, RunPurpose.SESSION)
# Bands: confidently above EASY or below HARD by the posterior's 90 % interval; fewer than MIN_ROLLOUTS is unknown.
EASY, HARD, MIN_ROLLOUTS, INTERVAL = 0.9, 0.1, 4, 0.9
_GRID = np.linspace(0.0, 1.0, 2001)
# Statistics that forget: per task, an exponentially decayed count over its own rollouts (an effective
# window of RECENT_WINDOW), kept beside the all-time one so a task the agent has since mastered (or
# forgotten) stops looking as it did. O(1) per rollout, O(tasks) to read, like the all-time counts.
RECENT_WINDOW = 32
RECENT_DECAY = 1.0 - 1.0 / RECENT_WINDOW

def counted_sql(done: str) -> str:
    """A CTE body adding the rollouts of the CTE `done` (columns team_id, run_id, task_id, status,
    total_reward, step_count, started_at, finished_at) to their tasks' statistics: part of the one
    statement that stores a rollout's outcome (runs/episodes/service.py), so a rollout counts exactly
    once, with its outcome, at no extra round trip. Takes %(succeeded)s, %(failed)s, %(counted_purposes)s,
    %(recent_decay)s (counted_params)."""
    return f"""
        INSERT INTO {TaskStat._meta.db_table} AS s (team_id, environment_version_id, task_id, agent_name, rollouts,
            successes, return_sum, steps_sum, seconds_sum, recent_rollouts, recent_successes, updated_at)
        SELECT d.team_id, run.environment_version_id, d.task_id, a.name, 1, (d.status = %(succeeded)s)::int,
            d.total_reward, d.step_count, COALESCE(EXTRACT(EPOCH FROM (d.finished_at - d.started_at)), 0),
            1, (d.status = %(succeeded)s)::int, now()
        FROM {done} d JOIN {Run._meta.db_table} run ON run.id = d.run_id JOIN runs_agent a ON a.id = run.agent_id
        WHERE d.status IN (%(succeeded)s, %(failed)s) AND run.purpose = ANY(%(counted_purposes)s)
        ON CONFLICT (environment_version_id, agent_name, task_id) DO UPDATE SET
            rollouts = s.rollouts + 1, successes = s.successes + EXCLUDED.successes,
            return_sum = s.return_sum + EXCLUDED.return_sum, steps_sum = s.steps_sum + EXCLUDED.steps_sum,
            seconds_sum = s.seconds_sum + EXCLUDED.seconds_sum,
            recent_rollouts = s.recent_rollouts * %(recent_decay)s + 1,
            recent_successes = s.recent_successes * %(recent_decay)s + EXCLUDED.successes, updated_at = now()
    """


def counted_params() -> dict:
    return {"succeeded": RolloutStatus.SUCCEEDED, "failed": RolloutStatus.FAILED, "counted_purposes": list(COUNTED_PURPOSES),
            "recent_decay": RECENT_DECAY}


def recent_counts_after(*, rollouts: float, successes: float, success: bool) -> tuple[float, float]:
    """The Python reference of counted_sql's forgetting (tests and simulations): one more rollout."""
    return rollouts * RECENT_DECAY + 1, successes * RECENT_DECAY + int(success)


@dataclass(frozen=True)
class TaskFigures:
    task_id: str
    difficulty: object
    rollouts: int
    successes: int
    pass_rate: float | None
    interval: tuple[float, float]
    learnable_mass: float
    recent_pass_rate: float | None
    recent_learnable_mass: float
    mean_return: float | None
    mean_steps: float | None
    mean_seconds: float | None
    band: str

    def as_json(self) -> dict:
        return {"task_id": self.task_id, "difficulty": self.difficulty, "rollouts": self.rollouts,
                "successes": self.successes, "pass_rate": self.pass_rate, "interval": list(self.interval),
                "mean_return": self.mean_return, "mean_steps": self.mean_steps, "band": self.band,
                "recent_pass_rate": self.recent_pass_rate}


def posterior(successes: np.ndarray, failures: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Beta(1 + s, 1 + f) per task on a grid: the central INTERVAL bounds and the mass in [HARD, EASY]."""
    a, b = (1.0 + successes)[:, None], (1.0 + failures)[:, None]
    x = np.clip(_GRID, 1e-12, 1 - 1e-12)[None, :]
    log_pdf = (a - 1) * np.log(x) + (b - 1) * np.log1p(-x)
    pdf = np.exp(log_pdf - log_pdf.max(axis=1, keepdims=True))
    cdf = np.cumsum(pdf, axis=1)
    cdf /= cdf[:, -1:]
    tail = (1 - INTERVAL) / 2
    low = _GRID[np.argmax(cdf >= tail, axis=1)]
    high = _GRID[np.argmax(cdf >= 1 - tail, axis=1)]
    at = lambda p: cdf[:, int(round(p * (len(_GRID) - 1)))]  # noqa: E731
    return low, high, at(EASY) - at(HARD)


def band_of(rollouts: int, low: float, high: float) -> str:
    if rollouts < MIN_ROLLOUTS:
        return "unknown"
    if low > EASY:
        return "too_easy"
    if high < HARD:
        return "too_hard"
    return "learnable"


def task_figures(*, version, agent_name: str, tasks: list[dict]) -> list[TaskFigures]:
    """Every task of `tasks` (the version's, in order) with the agent's statistics: O(tasks)."""
    rows = {row["task_id"]: row for row in TaskStat.objects.filter(
        environment_version=version, agent_name=agent_name).values()}
    return figures_from_counts(tasks=tasks, rows=rows)


def figures_from_counts(*, tasks: list[dict], rows: dict[str, dict]) -> list[TaskFigures]:
    """TaskFigures of `tasks` from rows of counts by task id (rollouts, successes, return_sum, steps_sum,
    seconds_sum, and optionally recent_rollouts and recent_successes, else the all-time ones): what the
    database keeps, or a simulation's own (bench/bench_curriculum.py)."""
    ids = [str(task.get("id")) for task in tasks]
    counts = np.array([[rows[i]["successes"], rows[i]["rollouts"] - rows[i]["successes"]] if i in rows else [0, 0]
                       for i in ids], dtype=float).reshape(-1, 2)
    recent = np.array([[rows[i].get("recent_successes", rows[i]["successes"]),
                        rows[i].get("recent_rollouts", rows[i]["rollouts"]) - rows[i].get("recent_successes", rows[i]["successes"])]
                       if i in rows else [0, 0] for i in ids], dtype=float).reshape(-1, 2)
    low, high, mass = posterior(counts[:, 0], counts[:, 1]) if len(ids) else ([], [], [])
    recent_mass = posterior(recent[:, 0], np.maximum(recent[:, 1], 0.0))[2] if len(ids) else []
    out = []
    for n, (task, task_id) in enumerate(zip(tasks, ids)):
        row = rows.get(task_id)
        done = row["rollouts"] if row else 0
        out.append(TaskFigures(
            task_id=task_id, difficulty=task.get("difficulty"), rollouts=done, successes=row["successes"] if row else 0,
            pass_rate=round(row["successes"] / done, 4) if done else None,
            interval=(round(float(low[n]), 4), round(float(high[n]), 4)), learnable_mass=float(mass[n]),
            recent_pass_rate=round(recent[n, 0] / recent[n].sum(), 4) if recent[n].sum() else None,
            recent_learnable_mass=float(recent_mass[n]),
            mean_return=round(row["return_sum"] / done, 4) if done else None,
            mean_steps=round(row["steps_sum"] / done, 2) if done else None,
            mean_seconds=round(row["seconds_sum"] / done, 3) if done else None,
            band=band_of(done, float(low[n]), float(high[n])),
        ))
    return out


def agents_with_stats(*, version) -> list[str]:
    return list(TaskStat.objects.filter(environment_version=version).values_list("agent_name", flat=True)
                .distinct().order_by("agent_name"))


def agents_by_rollouts(*, version) -> list[str]:
    """The agents with statistics on the version, most rollouts first (the task map's default is the first)."""
    rows = (TaskStat.objects.filter(environment_version=version).values("agent_name")
            .annotate(n=Sum("rollouts")).order_by("-n", "agent_name"))
    return [row["agent_name"] for row in rows]


def split_summary(*, tasks: list[dict], counts: dict[str, tuple[int, int]]) -> dict:
    """One agent's training and held-out (split = eval) tasks side by side, from (rollouts, successes) by
    task id: per split the tasks measured, their rollouts and `pass_rate`, the mean of their pass rates (each
    task counts once, however often a curriculum drew it); `gap` is train minus eval, the improvement that
    did not transfer (None until both are measured)."""
    out = {}
    for split in ("train", "eval"):
        rates = [counts[str(t.get("id"))][1] / counts[str(t.get("id"))][0] for t in tasks
                 if task_split(t) == split and counts.get(str(t.get("id")), (0, 0))[0]]
        rollouts = sum(counts.get(str(t.get("id")), (0, 0))[0] for t in tasks if task_split(t) == split)
        out[split] = {"tasks": sum(1 for t in tasks if task_split(t) == split), "measured": len(rates),
                      "rollouts": rollouts, "pass_rate": round(sum(rates) / len(rates), 4) if rates else None}
    train, held_out = out["train"]["pass_rate"], out["eval"]["pass_rate"]
    out["gap"] = round(train - held_out, 4) if train is not None and held_out is not None else None
    return out


def split_gaps(*, version, tasks: list[dict]) -> list[dict]:
    """split_summary of every agent with statistics on the version, most rollouts first: one read of its
    statistics rows (O(tasks x agents), never of rollouts)."""
    by_agent: dict[str, dict[str, tuple[int, int]]] = {}
    for row in TaskStat.objects.filter(environment_version=version).values("agent_name", "task_id", "rollouts", "successes"):
        by_agent.setdefault(row["agent_name"], {})[row["task_id"]] = (row["rollouts"], row["successes"])
    order = sorted(by_agent, key=lambda name: (-sum(n for n, _ in by_agent[name].values()), name))
    return [{"agent": name, **split_summary(tasks=tasks, counts=by_agent[name])} for name in order]
