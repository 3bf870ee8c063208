"""Paired A/B (check of issue 25.10): two sides compared instance by instance, one definition for the
compare page, `GET /quality/compare` and `manage.py compare_ab`.

Definitions:
- an *instance* is (task, seed, repeat): A's rollout and B's rollout of the same task, seed and repeat
  make a *pair* (repeat k of A with repeat k of B; with one repeat a pair is (task, seed));
- a side's *reward* of a rollout is its verifier reward, else 1 when it passed and 0 otherwise
  (report.probe_reward); it *passes* when it succeeded (report.passed);
- the paired difference is the mean over pairs of B's reward minus A's, with a 95 % bootstrap interval
  (BOOTSTRAP_RESAMPLES resamples of the pairs, numpy with a fixed seed: the same rows give the same
  interval), given from MIN_PAIRS_FOR_INTERVAL pairs;
- McNemar's test on pass/fail over the discordant pairs (A passes and B fails: `a_only`; B passes and
  A fails: `b_only`): exact two-sided binomial, p = min(1, 2 P(X <= min(a_only, b_only))) with X ~
  Binomial(a_only + b_only, 1/2), below EXACT_BELOW discordant pairs; the chi-square with continuity
  correction, (|a_only - b_only| - 1)^2 / (a_only + b_only) on one degree of freedom, from there;
- the *flips* are the pairs whose pass/fail differs, each with both rollouts.
"""
from math import comb, erfc, sqrt

import numpy as np

from ..figures import DONE_STATUSES
from .report import BOOTSTRAP_RESAMPLES, passed, probe_reward

MIN_PAIRS_FOR_INTERVAL = 10
EXACT_BELOW = 25
FLIPS_LISTED = 500


def instance_key(row: dict) -> tuple:
    return (str(row["task_id"]), int(row["seed"]), int(row.get("repeat") or 0))


def mcnemar(*, a_only: int, b_only: int) -> dict:
    """McNemar's test of the discordant counts (see the module's definitions)."""
    n = a_only + b_only
    if n == 0:
        return {"test": "none", "discordant": 0, "p_value": None}
    if n < EXACT_BELOW:
        tail = sum(comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2 ** n
        return {"test": "exact binomial", "discordant": n, "p_value": round(min(1.0, 2 * tail), 4)}
    statistic = (abs(a_only - b_only) - 1) ** 2 / n
    return {"test": "chi-square, continuity-corrected", "discordant": n, "statistic": round(statistic, 4),
            "p_value": round(erfc(sqrt(statistic / 2)), 4)}


def side_of(row: dict) -> dict:
    return {"rollout": row["id"], "status": row["status"], "passed": passed(row["status"]),
            "reward": round(probe_reward(row), 4)}


def paired_figures(*, a_rows: list[dict], b_rows: list[dict]) -> dict:
    """Rows: id, task_id, seed, repeat, status, verifier_reward of each side's rollouts (any status: only
    done ones pair). -> the pairs' counts, the paired difference with its interval, McNemar's test and the flips."""
    a_by = {instance_key(row): row for row in sorted(a_rows, key=lambda row: row["id"]) if row["status"] in DONE_STATUSES}
    b_by = {instance_key(row): row for row in sorted(b_rows, key=lambda row: row["id"]) if row["status"] in DONE_STATUSES}
    keys = sorted(a_by.keys() & b_by.keys())
    result = {"pairs": len(keys), "a_unpaired": len(a_by) - len(keys), "b_unpaired": len(b_by) - len(keys),
              "both_pass": 0, "both_fail": 0, "a_only": 0, "b_only": 0, "mean_difference": None, "ci95": None,
              "mcnemar": mcnemar(a_only=0, b_only=0), "flips": [], "flips_total": 0, "note": ""}
    if not keys:
        result["note"] = "No instance (task, seed) was played by both sides: nothing to pair."
        return result
    differences = []
    for key in keys:
        a, b = side_of(a_by[key]), side_of(b_by[key])
        differences.append(b["reward"] - a["reward"])
        if a["passed"] and b["passed"]:
            result["both_pass"] += 1
        elif not a["passed"] and not b["passed"]:
            result["both_fail"] += 1
        else:
            result["a_only" if a["passed"] else "b_only"] += 1
            result["flips_total"] += 1
            if len(result["flips"]) < FLIPS_LISTED:
                result["flips"].append({"task_id": key[0], "seed": key[1], "repeat": key[2], "a": a, "b": b})
    values = np.array(differences, float)
    result["mean_difference"] = round(float(values.mean()), 4)
    result["mcnemar"] = mcnemar(a_only=result["a_only"], b_only=result["b_only"])
    if len(keys) < MIN_PAIRS_FOR_INTERVAL:
        result["note"] = (f"Only {len(keys)} paired instance{'' if len(keys) == 1 else 's'}: too few for a bootstrap"
                          f" interval (it needs {MIN_PAIRS_FOR_INTERVAL}).")
        return result
    rng = np.random.default_rng(0)
    boot = values[rng.integers(0, values.size, (BOOTSTRAP_RESAMPLES, values.size))].mean(axis=1)
    result["ci95"] = [round(float(np.percentile(boot, 2.5)), 4), round(float(np.percentile(boot, 97.5)), 4)]
    return result
