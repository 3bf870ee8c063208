"""Curriculum: a simulated learner trained under the studio's samplers, uniform against learnable (and ladder).

    .venv/bin/python bench/bench_curriculum.py [--iterations 300] [--seeds 5]

The learner (GRPO-like) practises groups: each iteration draws 8 training tasks with the sampler under
test (runs.curriculum.sampler, the code the API and workers call, on statistics built by
runs.curriculum.stats.figures_from_counts as the database would keep them), plays 8 rollouts of each,
and learns only from groups whose outcomes differ (a zero-variance group carries no gradient). Tasks sit
on 6 difficulty levels; a task's pass probability is a logistic in (skill of its level + its own
practice - its level's offset); practice on a level also lifts that level's held-out eval tasks a little
(transfer). Reported per strategy, as medians over seeds: the share of groups with signal, and the
rollouts until the eval pass rate reaches the target. No server is needed: it measures the sampling.
"""
import argparse
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
os.environ.setdefault("DEBUG", "true")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from runs.curriculum import sampler  # noqa: E402
from runs.curriculum.stats import figures_from_counts  # noqa: E402

LEVELS, PER_LEVEL, EVAL_PER_LEVEL = 6, 10, 3
GROUPS, GROUP_SIZE = 8, 8
OFFSETS = {level: -4.0 + 1.8 * level for level in range(1, LEVELS + 1)}  # level 1 is easy, 6 out of reach at first
OWN_RATE, TRANSFER_RATE = 0.35, 0.04


def tasks():
    train = [{"id": f"L{level}-{i}", "difficulty": level} for level in range(1, LEVELS + 1) for i in range(PER_LEVEL)]
    held = [{"id": f"L{level}-eval{i}", "difficulty": level, "split": "eval"} for level in range(1, LEVELS + 1)
            for i in range(EVAL_PER_LEVEL)]
    return train, held


def pass_probability(task, skill, practice):
    level = task["difficulty"]
    logit = skill[level] + OWN_RATE * practice.get(task["id"], 0) - OFFSETS[level] + 2.5
    return 1 / (1 + math.exp(-logit))


def train(strategy: str, *, seed: int, iterations: int, target: float) -> dict:
    rng = np.random.default_rng(seed)
    train_tasks, eval_tasks = tasks()
    skill = dict.fromkeys(range(1, LEVELS + 1), 0.0)
    practice: dict[str, int] = {}
    counts: dict[str, dict] = {}
    groups = with_signal = rollouts = 0
    reached = None
    for iteration in range(iterations):
        figures = figures_from_counts(tasks=train_tasks, rows=counts)
        chosen = sampler.sample(figures, k=GROUPS, strategy=strategy, seed=seed * 100_003 + iteration)
        for task_id in chosen:
            task = next(t for t in train_tasks if t["id"] == task_id)
            p = pass_probability(task, skill, practice)
            outcomes = rng.random(GROUP_SIZE) < p
            rollouts += GROUP_SIZE
            row = counts.setdefault(task_id, {"rollouts": 0, "successes": 0, "return_sum": 0.0, "steps_sum": 0, "seconds_sum": 0.0})
            row["rollouts"] += GROUP_SIZE
            row["successes"] += int(outcomes.sum())
            row["steps_sum"] += GROUP_SIZE
            groups += 1
            if 0 < outcomes.sum() < GROUP_SIZE:  # only a group with both outcomes teaches
                with_signal += 1
                practice[task_id] = practice.get(task_id, 0) + 1
                skill[task["difficulty"]] += TRANSFER_RATE
        eval_rate = float(np.mean([pass_probability(t, skill, {}) for t in eval_tasks]))
        if reached is None and eval_rate >= target:
            reached = rollouts
    return {"signal": with_signal / groups, "rollouts_to_target": reached, "final_eval": eval_rate}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.6, help="eval pass rate to reach")
    args = parser.parse_args()
    rows = {}
    for strategy in ("uniform", "learnable", "ladder"):
        runs = [train(strategy, seed=s, iterations=args.iterations, target=args.target) for s in range(args.seeds)]
        reached = [r["rollouts_to_target"] for r in runs if r["rollouts_to_target"] is not None]
        rows[strategy] = {
            "signal": statistics.median(r["signal"] for r in runs),
            "reached": f"{len(reached)}/{len(runs)}",
            "rollouts": statistics.median(reached) if reached else None,
            "final_eval": statistics.median(r["final_eval"] for r in runs),
        }
    base = rows["uniform"]
    print(f"simulated learner: {LEVELS} levels x {PER_LEVEL} training tasks (+{EVAL_PER_LEVEL} held out each), "
          f"{GROUPS} groups of {GROUP_SIZE} per iteration, {args.iterations} iterations, {args.seeds} seeds, target eval {args.target:.0%}")
    print(f"{'strategy':<10} {'groups with signal':>19} {'reached':>8} {'rollouts to target':>19} {'vs uniform':>11} {'final eval':>11}")
    for strategy, row in rows.items():
        ratio = f"{base['rollouts'] / row['rollouts']:.2f}x" if row["rollouts"] and base["rollouts"] else "—"
        rollouts = f"{row['rollouts']:,.0f}" if row["rollouts"] else "not reached"
        print(f"{strategy:<10} {row['signal']:>18.1%} {row['reached']:>8} {rollouts:>19} {ratio:>11} {row['final_eval']:>10.1%}")


if __name__ == "__main__":
    main()
