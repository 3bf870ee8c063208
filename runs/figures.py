"""Every figure shown about a run, defined once and computed with SQL aggregates.

The run page, its live updates, `GET /api/v1/runs/{id}` and `run_rollouts --wait` all show
`run_figures(run)`, so they cannot disagree. The definitions:

- done: rollouts in a terminal state other than cancelled (succeeded, failed, errored, timed out);
  cancelled rollouts are counted apart, never as done and never plotted;
- pending: queued or running; a run is over when nothing is pending;
- success rate: succeeded / done (an errored or timed-out rollout counts as not succeeded); a rollout
  succeeds by its version's rule (`rollout_succeeded`, [success] in environment.toml): the verifier's
  reward at least `verifier_at_least`, or the return at least `return_at_least`; by default the
  verifier's reward > 0, or the return > 0 when there is no verifier;
- two rewards, always named: "return" (the sum of the episode's step rewards) and "verifier" (what the
  environment's verify() judged). A done rollout has a return when its episode ran to its end
  (succeeded or failed) and a verifier reward when verify() gave one; each mean is over the rollouts
  that have that reward, with how many done rollouts have none beside it;
- mean steps: over done rollouts.
"""
from dataclasses import dataclass, field, fields

from django.db.models import Count, F, Sum

from environments.models import EnvironmentVersion

from .models import Rollout, RolloutStatus, Run, RunTally

RETURN = "return"
VERIFIER = "verifier"
REWARD_NAMES = {RETURN: "sum of the episode's step rewards", VERIFIER: "the verifier's judgement of the final state"}

DONE_STATUSES = (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.ERRORED, RolloutStatus.TIMED_OUT)
PENDING_STATUSES = (RolloutStatus.QUEUED, RolloutStatus.RUNNING)
# An episode that ran to its end (the environment terminated or truncated it, and verify() answered).
RETURN_STATUSES = (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED)


def rollout_succeeded(rule: dict | None, *, verifier_reward: float | None, total_reward: float) -> bool:
    """Whether an episode that ran to its end succeeded, by its version's [success] rule."""
    rule = rule or {}
    if "return_at_least" in rule:
        return total_reward >= rule["return_at_least"]
    if "verifier_at_least" in rule:
        return verifier_reward is not None and verifier_reward >= rule["verifier_at_least"]
    return (verifier_reward if verifier_reward is not None else total_reward) > 0


def success_rule_text(rule: dict | None) -> str:
    """The rule in words, shown beside every success rate."""
    rule = rule or {}
    if "return_at_least" in rule:
        return f"return ≥ {rule['return_at_least']:g}"
    if "verifier_at_least" in rule:
        return f"verifier reward ≥ {rule['verifier_at_least']:g}"
    return "verifier reward > 0 (return > 0 without a verifier)"


@dataclass
class _Tally:
    """Sums and counts that add up across tasks, so difficulty and run figures are exact, not means of means."""

    total: int = 0
    counts: dict = field(default_factory=lambda: {status: 0 for status in RolloutStatus.values})
    return_n: int = 0
    return_sum: float = 0.0
    verifier_n: int = 0
    verifier_sum: float = 0.0
    steps_sum: int = 0

    def add(self, other: "_Tally") -> None:
        for name in (f.name for f in fields(self)):
            if name == "counts":
                for status, n in other.counts.items():
                    self.counts[status] += n
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def figures(self) -> dict:
        done = sum(self.counts[status] for status in DONE_STATUSES)
        succeeded = self.counts[RolloutStatus.SUCCEEDED]
        return {
            "total": self.total,
            "done": done,
            "cancelled": self.counts[RolloutStatus.CANCELLED],
            "pending": sum(self.counts[status] for status in PENDING_STATUSES),
            "counts": dict(self.counts),
            "succeeded": succeeded,
            "success_rate": _ratio(succeeded, done),
            RETURN: {"mean": _mean(self.return_sum, self.return_n), "count": self.return_n, "missing": done - self.return_n},
            VERIFIER: {"mean": _mean(self.verifier_sum, self.verifier_n), "count": self.verifier_n, "missing": done - self.verifier_n},
            "mean_steps": round(self.steps_sum / done, 2) if done else None,
        }


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _mean(total: float, n: int) -> float | None:
    return round(total / n, 4) if n else None


def _tallies_by_task(runs: list[Run]) -> dict[int, dict[str, _Tally]]:
    """Each run's tallies by task, from the rows the database keeps as rollouts change (RunTally):
    one indexed read of (runs x tasks x shards) rows, however many rollouts the runs have."""
    sums = {name: Sum(name) for name in _TALLY_SUMS}
    rows = RunTally.objects.filter(run__in=[run.pk for run in runs]).order_by().values("run_id", "task_id").annotate(**sums)
    tallies = {run.pk: {} for run in runs}
    for row in rows:
        if not row["total"]:
            continue
        tallies[row["run_id"]][row["task_id"]] = _Tally(
            total=row["total"],
            counts={status: row[f"n_{status}"] for status in RolloutStatus.values},
            return_n=row["return_n"], return_sum=row["return_sum"] or 0.0,
            verifier_n=row["verifier_n"], verifier_sum=row["verifier_sum"] or 0.0,
            steps_sum=row["steps_sum"] or 0,
        )
    return tallies


_TALLY_SUMS = ("total", *(f"n_{status}" for status in RolloutStatus.values), "return_n", "return_sum", "verifier_n",
               "verifier_sum", "steps_sum")


def run_figures(run: Run) -> dict:
    """The run's figures overall, by difficulty and by task (see the module docstring), with its status."""
    return runs_figures([run])[run.pk]


def runs_figures(runs: list[Run]) -> dict[int, dict]:
    """run_figures of many runs (a list page or endpoint) in three queries, whatever their size."""
    tallies = _tallies_by_task(runs)
    version_ids = {run.environment_version_id for run in runs}
    difficulties = task_difficulties(version_ids)
    # Only the manifests' [success] rules: a version's files and tasks stay in the database.
    rules = dict(EnvironmentVersion.objects.filter(pk__in=version_ids).values_list("id", "manifest__success"))
    figures = {}
    for run in runs:
        by_task, difficulty_of = tallies[run.pk], difficulties.get(run.environment_version_id, {})
        overall, by_difficulty = _Tally(), {}
        for task_id, tally in by_task.items():
            overall.add(tally)
            by_difficulty.setdefault(_difficulty_key(difficulty_of.get(task_id)), _Tally()).add(tally)
        figures[run.pk] = {
            "run_id": run.pk,
            "status": run.status,
            "success_rule": success_rule_text(rules.get(run.environment_version_id)),
            **overall.figures(),
            "by_difficulty": {key: by_difficulty[key].figures() for key in sorted(by_difficulty, key=_difficulty_order)},
            "by_task": {task_id: by_task[task_id].figures() for task_id in sorted(by_task)},
            "signal": signal_of(by_task.values()),
        }
    return figures


def signal_of(tallies) -> dict:
    """How much of a run can teach group-based RL (GRPO and its kin): a group is the done rollouts of one
    task; it carries signal when its outcomes differ (some succeeded, some failed). A group whose
    rollouts all succeeded, all failed, or that has one rollout has zero variance: no gradient."""
    groups = zero = 0
    for tally in tallies:
        done = sum(tally.counts[status] for status in DONE_STATUSES)
        if not done:
            continue
        groups += 1
        succeeded = tally.counts[RolloutStatus.SUCCEEDED]
        zero += succeeded in (0, done)
    return {"groups": groups, "zero_variance_groups": zero, "share_with_signal": _ratio(groups - zero, groups)}


def _difficulty_key(difficulty) -> str:
    return "none" if difficulty is None else str(difficulty)


def _difficulty_order(key: str):
    try:
        return (0, float(key), key)
    except ValueError:
        return (1, 0.0, key)


def with_run_counts(runs):
    """Annotate total, done, cancelled, succeeded, bad (errored or timed out), running and success_rate
    onto a run queryset: the list pages' figures, by the same definitions as run_figures, read from each
    listed run's tally rows (so a list costs its page, not the rollouts behind it)."""
    from django.db.models import ExpressionWrapper, FloatField, IntegerField, OuterRef, Subquery, Value
    from django.db.models.functions import Coalesce, NullIf

    def tallied(*columns):
        total = sum((F(column) for column in columns[1:]), F(columns[0]))
        rows = RunTally.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(n=Sum(total)).values("n")
        return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))

    return runs.annotate(
        total=tallied("total"),
        done=tallied(*(f"n_{status}" for status in DONE_STATUSES)),
        cancelled=tallied("n_cancelled"),
        succeeded=tallied("n_succeeded"),
        bad=tallied("n_errored", "n_timed_out"),
        running=tallied("n_running"),
    ).annotate(
        success_rate=ExpressionWrapper(F("succeeded") * Value(1.0) / NullIf(F("done"), 0), output_field=FloatField()),
    )


def task_difficulties(version_ids) -> dict[int, dict[str, object]]:
    """Each version's task difficulties by task id, read inside the database (tasks can be megabytes)."""
    from django.db import connection

    if not version_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT v.id, task->>'id', task->'difficulty' FROM environments_environmentversion v,"
            " jsonb_array_elements(CASE WHEN jsonb_typeof(v.tasks) = 'array' THEN v.tasks ELSE '[]'::jsonb END) task"
            " WHERE v.id = ANY(%s)",
            [list(version_ids)],
        )
        difficulties = {}
        for version_id, task_id, difficulty in cursor.fetchall():
            difficulties.setdefault(version_id, {})[task_id] = difficulty
        return difficulties


def return_histogram(run: Run, *, bins: int = 12) -> dict:
    """Counts of done rollouts' returns (those that have one) in `bins` equal bins from the lowest to
    the highest: {"edges": [lo, ..., hi], "counts": [...], "count": n}.

    Binning reads every return of the run, so the result is kept in the cache under what determines it:
    the run's return count and sum from its tally (one indexed read of a few rows) and its latest
    finished rollout. A run whose returns have not changed since is answered from the cache."""
    from django.core.cache import cache
    from django.db.models import Max

    tally = RunTally.objects.filter(run=run).aggregate(n=Sum("return_n"), total=Sum("return_sum"))
    latest = Rollout.objects.filter(run=run).aggregate(at=Max("finished_at"))["at"]
    latest = latest.timestamp() if latest is not None else None
    key = f"runs:return-histogram:{run.pk}:{run.created_at.timestamp()}:{bins}:{tally['n']}:{tally['total']!r}:{latest}"
    found = cache.get(key)
    if found is None:
        found = _return_histogram(run, bins=bins)
        cache.set(key, found, timeout=3600)
    return found


def _return_histogram(run: Run, *, bins: int) -> dict:
    from django.db.models import FloatField, Max, Min, Value
    from django.db.models.functions import Floor, Least

    returns = Rollout.objects.filter(run=run, status__in=RETURN_STATUSES)
    span = returns.aggregate(lo=Min("total_reward"), hi=Max("total_reward"), n=Count("id"))
    if not span["n"]:
        return {"edges": [], "counts": [], "count": 0}
    lo, hi = span["lo"], span["hi"]
    if hi == lo:
        return {"edges": [lo, hi], "counts": [span["n"]], "count": span["n"]}
    width = (hi - lo) / bins
    rows = (
        returns.order_by()
        .annotate(bin=Least(Floor((F("total_reward") - Value(lo)) / Value(width)), Value(float(bins - 1)), output_field=FloatField()))
        .values("bin")
        .annotate(n=Count("id"))
    )
    counts = [0] * bins
    for row in rows:
        counts[int(row["bin"])] += row["n"]
    return {"edges": [round(lo + i * width, 6) for i in range(bins + 1)], "counts": counts, "count": span["n"]}


def runs_compared(runs: list[Run]) -> dict:
    """Runs side by side, task by task: each run's figures per task and overall, and each later run's
    difference from the first (success rate and mean return), for the comparison page and its API."""
    by_run = runs_figures(runs)
    figures = [by_run[run.pk] for run in runs]
    task_ids = sorted({task_id for f in figures for task_id in f["by_task"]})

    def delta(a, b):
        return None if a is None or b is None else round(b - a, 4)

    rows = []
    for task_id in task_ids:
        cells = [f["by_task"].get(task_id) for f in figures]
        base = cells[0]
        rows.append({
            "task_id": task_id,
            "cells": [
                None if cell is None else {
                    **cell,
                    "success_delta": None if base is None or i == 0 else delta(base["success_rate"], cell["success_rate"]),
                    "return_delta": None if base is None or i == 0 else delta(base[RETURN]["mean"], cell[RETURN]["mean"]),
                }
                for i, cell in enumerate(cells)
            ],
        })
    overall = [
        {**f, "success_delta": None if i == 0 else delta(figures[0]["success_rate"], f["success_rate"]),
         "return_delta": None if i == 0 else delta(figures[0][RETURN]["mean"], f[RETURN]["mean"])}
        for i, f in enumerate(figures)
    ]
    return {"runs": [run.pk for run in runs], "overall": overall, "tasks": rows}


ROLLOUT_ORDERS = {
    "id": ("id",),
    "return": ("total_reward", "id"), "-return": ("-total_reward", "id"),
    "verifier": ("verifier_reward", "id"), "-verifier": ("-verifier_reward", "id"),
    "steps": ("step_count", "id"), "-steps": ("-step_count", "id"),
    "finished": ("finished_at", "id"), "-finished": ("-finished_at", "id"),
}


def run_rollouts(run: Run, *, status: str = "", task_id: str = "", order: str = "id"):
    """The run page's rollouts table: filtered by status and task, in one of ROLLOUT_ORDERS."""
    rollouts = Rollout.objects.filter(run=run)
    if status in RolloutStatus.values:
        rollouts = rollouts.filter(status=status)
    if task_id:
        rollouts = rollouts.filter(task_id=task_id)
    return rollouts.order_by(*ROLLOUT_ORDERS.get(order, ROLLOUT_ORDERS["id"]))


def run_rollouts_count(summary: dict, *, status: str = "", task_id: str = "") -> int | None:
    """How many rows run_rollouts gives for these filters, from the run's figures (None when the figures
    do not say: a status and a task together)."""
    status = status if status in RolloutStatus.values else ""
    if status and task_id:
        return None
    if status:
        return summary["counts"][status]
    if task_id:
        return summary["by_task"].get(task_id, {}).get("total", 0)
    return summary["total"]


POINTS_SHOWN = 400


def run_points(run: Run, *, returned: int) -> list[dict]:
    """What the reward chart plots: the latest POINTS_SHOWN done rollouts that have a return, in finishing
    order, each with `n`, its place among all `returned` of them (the run's return count). A live page
    appends points as rollouts finish and drops the oldest past POINTS_SHOWN, so it equals a reload."""
    latest = list(
        Rollout.objects.filter(run=run, status__in=RETURN_STATUSES)
        .order_by("-finished_at", "-id")
        .values("id", "status", "total_reward", "verifier_reward", "task_id", "seed")[:POINTS_SHOWN]
    )
    latest.reverse()
    first = returned - len(latest) + 1
    return [{**point, "n": first + i} for i, point in enumerate(latest)]


POINT_FIELDS = ("id", "status", "total_reward", "verifier_reward", "task_id", "seed")


def points_packed(points: list[dict]) -> dict:
    """run_points as the page embeds them: one list per field and the first point's `n` (the others
    follow it), a third of the bytes of a list of objects; static/js/run_live.js unpacks them."""
    return {"n": points[0]["n"] if points else 1, **{name: [p[name] for p in points] for name in POINT_FIELDS}}


TASKS_CHARTED = 40


def run_analytics(summary: dict, histogram: dict) -> dict:
    """What the run page's three small charts draw, from the run's figures and return histogram: the
    histogram, success by difficulty, and success by task for the first TASKS_CHARTED tasks by id (with
    how many tasks there are), each group as {success_rate, succeeded, done}. Its size depends on the
    bins and difficulties, never on the rollouts or tasks; the page embeds it and every live summary
    carries it, so a watched page draws what a reload draws."""
    def slim(groups: dict) -> dict:
        return {key: {name: group[name] for name in ("success_rate", "succeeded", "done")} for key, group in groups.items()}

    charted = dict(list(summary["by_task"].items())[:TASKS_CHARTED])
    return {"histogram": histogram, "by_task": slim(charted), "tasks": len(summary["by_task"]),
            "by_difficulty": slim(summary["by_difficulty"])}


# Live pages swap these in by id: the same templates a reload renders, so a live page equals a reload.
SUMMARY_PARTIALS = {"summary-stats": "runs/_summary.html", "by-difficulty": "runs/_by_difficulty.html"}


def run_summary_message(run: Run) -> dict:
    """What a run's websocket sends as its summary: the figures, and the page's parts rendered from them."""
    from django.template.loader import render_to_string

    summary = run_figures(run)
    html = {element: render_to_string(template, {"summary": summary}) for element, template in SUMMARY_PARTIALS.items()}
    histogram = return_histogram(run)
    return {"type": "run", "summary": summary, "html": html, "histogram": histogram,
            "analytics": run_analytics(summary, histogram)}
