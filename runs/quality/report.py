"""Every quality figure, defined once: probes, step reward against the outcome, oracle per instance,
determinism, difficulty and transfer, verifier regression, the audit report (its card lines: card.py; its leak
scan: leaks.py; its answer probes, played by services.audit_complete: answers.py; its verifier consistency
and portability replays, also played there: consistency.py), and version A/B statistics. The card, the audit
and A/B pages, the API and `audit_version` all show what these functions return.

Definitions:
- a rollout *passes* when it succeeded (runs/figures.py: succeeded / done is the success rate);
- a probe's *reward* of a rollout is its verifier reward; for a rollout without one (a version with no
  verifier, such as a Gymnasium environment) 1 when it succeeded by the version's [success] rule and
  0 otherwise (an errored or timed-out probe rollout scored nothing); a probe is flagged when its mean is above the version's threshold
  (`[quality] probe_threshold`, default 0.05, or `[quality.probe_thresholds] NAME = x`);
- pass@k = 1 - C(n-c, k) / C(n, k) and pass^k = C(c, k) / C(n, k) over a task's n done rollouts of
  one agent with c passes (tau-bench's reliability metric);
- A/B: the mean verifier reward of B minus A, a 95 % bootstrap interval (2,000 resamples of each
  side) and a two-sided permutation p-value (5,000 relabellings), both with a fixed seed.
"""
from math import comb

from django.db.models import Q

import numpy as np

from ..figures import DONE_STATUSES
from ..models import AgentKind, Rollout, RolloutStatus, RunPurpose
from ..selectors import compare_trajectories
from .card import card_lines, check_summary, report_status
from .catalogue import GREEN
from .leaks import leak_figures
from .models import AuditRole

DEFAULT_PROBE_THRESHOLD = 0.05
BUILTIN_PROBES = ("noop", "random", "claim", "peek", "tamper")
PASS_AT_K = (1, 2, 5)
BOOTSTRAP_RESAMPLES = 2000
PERMUTATIONS = 5000
# Difficulty order (difficulty_order): red when the levels run backwards this strongly and this surely,
# amber when they lean backwards.
ORDER_BACKWARDS, ORDER_P_RED = -0.5, 0.05
ORDER_WEAK, ORDER_P_AMBER = -0.2, 0.1


def passed(status: str) -> bool:
    """Whether a rollout passed: the run figures' success (runs/figures.py)."""
    return status == RolloutStatus.SUCCEEDED


def probe_threshold(manifest: dict, name: str) -> float:
    quality = manifest.get("quality") or {}
    per_probe = quality.get("probe_thresholds") or {}
    value = per_probe.get(name, quality.get("probe_threshold", DEFAULT_PROBE_THRESHOLD))
    return float(value)


# -- the audit's checks ---------------------------------------------------------------------------


def _rows(run_ids):
    return list(
        Rollout.objects.filter(run_id__in=run_ids).order_by("id")
        .values("id", "run_id", "task_id", "seed", "repeat", "status", "verifier_reward", "total_reward", "error", "end_reason")
    )


def _crash_of(row) -> str | None:
    """What an errored or timed-out rollout says about the environment (None: not a crash)."""
    if row["status"] in (RolloutStatus.ERRORED, RolloutStatus.TIMED_OUT):
        return row["error"] or row["status"]
    return None


def probe_reward(row: dict) -> float:
    """A probe's reward of one rollout (see the module's definitions)."""
    if row["verifier_reward"] is not None:
        return row["verifier_reward"]
    return 1.0 if passed(row["status"]) else 0.0


def probe_figures(*, name: str, rows: list[dict], threshold: float) -> dict:
    done = [row for row in rows if row["status"] in DONE_STATUSES]
    rewards = [probe_reward(row) for row in done]
    best = max(done, key=lambda row: (probe_reward(row), -row["id"]), default=None)
    mean = round(sum(rewards) / len(rewards), 4) if rewards else None
    returns = [row["total_reward"] or 0.0 for row in done]
    # Episodes whose steps paid while the verifier said 0: the return was farmed, not earned.
    unearned = [row for row in done if row["verifier_reward"] is not None and row["verifier_reward"] <= 0 and (row["total_reward"] or 0.0) > 0]
    crashes = [
        {"rollout": row["id"], "task_id": row["task_id"], "seed": row["seed"], "error": _crash_of(row)[:300]}
        for row in done if _crash_of(row) and "agent.py" not in (row["error"] or "")
    ]
    return {
        "name": name,
        "rollouts": len(done),
        "mean_reward": mean,
        "max_reward": round(max(rewards), 4) if rewards else None,
        "mean_return": round(sum(returns) / len(returns), 4) if returns else None,
        "unearned_return_rollouts": len(unearned),
        "best_return_rollout": max(done, key=lambda row: (row["total_reward"] or 0.0, -row["id"]))["id"] if done else None,
        "threshold": threshold,
        "flagged": mean is not None and mean > threshold,
        "best_rollout": best["id"] if best else None,
        "crashes": crashes,
    }


def stochastic_tasks(manifest: dict) -> dict:
    """Tasks the package declares stochastic (`[quality] stochastic`): a list of ids, or a table of
    id = the oracle pass rate expected at least. -> {task_id: floor or None}."""
    declared = (manifest.get("quality") or {}).get("stochastic") or {}
    if isinstance(declared, list):
        return {str(task_id): None for task_id in declared}
    if isinstance(declared, dict):
        return {str(task_id): float(floor) for task_id, floor in declared.items()}
    return {}


def oracle_figures(rows: list[dict], task_ids: list[str], *, stochastic: dict | None = None) -> dict:
    """The oracle per instance (task, seed): pass^k over its k tries there (every try must pass);
    every failed instance is listed. A task declared stochastic is judged by its pass rate."""
    stochastic = stochastic or {}
    solved_tasks = {row["task_id"] for row in rows if passed(row["status"])}
    errors = [
        {"rollout": row["id"], "task_id": row["task_id"], "seed": row["seed"], "error": (row["error"] or row["status"])[:300]}
        for row in rows if _crash_of(row)
    ]
    unsolved = [task_id for task_id in task_ids if task_id not in solved_tasks]
    first_failure = {}
    for row in rows:
        if row["task_id"] in unsolved and row["task_id"] not in first_failure:
            first_failure[row["task_id"]] = row["id"]
    instances: dict = {}
    for row in rows:
        if row["status"] in DONE_STATUSES:
            entry = instances.setdefault((row["task_id"], row["seed"]), {"tries": 0, "passes": 0, "rollout": None})
            entry["tries"] += 1
            entry["passes"] += passed(row["status"])
            if not passed(row["status"]) and entry["rollout"] is None:
                entry["rollout"] = row["id"]
    failures = [
        {"task_id": task_id, "seed": seed, "tries": entry["tries"], "passes": entry["passes"],
         "pass_hat_k": pass_hat_k(entry["tries"], entry["passes"], entry["tries"]), "rollout": entry["rollout"],
         "stochastic": task_id in stochastic}
        for (task_id, seed), entry in sorted(instances.items(), key=lambda item: (str(item[0][0]), item[0][1]))
        if entry["passes"] < entry["tries"]
    ]
    rates = {}
    for (task_id, _seed), entry in instances.items():
        if task_id in stochastic:
            tries, passes = rates.get(task_id, (0, 0))
            rates[task_id] = (tries + entry["tries"], passes + entry["passes"])
    stochastic_rates = [
        {"task_id": task_id, "pass_rate": round(passes / tries, 4), "floor": stochastic[task_id],
         "below_floor": passes < tries if stochastic[task_id] is None else passes / tries < stochastic[task_id]}
        for task_id, (tries, passes) in sorted(rates.items()) if tries
    ]
    return {
        "tasks": len(task_ids), "solved": len(task_ids) - len(unsolved), "unsolved": unsolved,
        "unsolved_rollouts": first_failure, "errors": errors,
        "instances": len(instances), "failures": failures, "stochastic": stochastic_rates,
    }


def return_figures(*, probes: list[dict], oracle_rows: list[dict], rows: list[dict]) -> dict:
    """Step reward against the outcome: the oracle's mean return and verifier reward, each probe
    whose return is farmed (see the catalogue's `probe.return`), and the return-verifier Pearson
    correlation over every done rollout of the audit that has a verifier reward."""
    done = [row for row in oracle_rows if row["status"] in DONE_STATUSES]
    oracle_return = round(sum(row["total_reward"] or 0.0 for row in done) / len(done), 4) if done else None
    oracle_reward = round(sum(probe_reward(row) for row in done) / len(done), 4) if done else None
    farmed = []
    for probe in probes:
        if not probe["rollouts"] or probe["mean_return"] is None:
            continue
        reasons = []
        if (oracle_return is not None and probe["mean_return"] > 0 and probe["mean_return"] >= oracle_return
                and probe["mean_reward"] < oracle_reward):
            reasons.append(f"its mean return {probe['mean_return']:.2f} reaches the oracle's {oracle_return:.2f}"
                           f" with a verifier reward of {probe['mean_reward']:.2f} (the oracle's {oracle_reward:.2f})")
        if probe["unearned_return_rollouts"] * 2 > probe["rollouts"]:
            reasons.append(f"its return is above 0 where the verifier says 0 in {probe['unearned_return_rollouts']}"
                           f" of {probe['rollouts']} episodes")
        if reasons:
            farmed.append({"name": probe["name"], "reasons": reasons, "rollout": probe["best_return_rollout"]})
    pairs = [(row["total_reward"] or 0.0, row["verifier_reward"]) for row in rows
             if row["status"] in DONE_STATUSES and row["verifier_reward"] is not None]
    correlation = None
    if len(pairs) >= 3:
        returns, rewards = np.array(pairs, float).T
        if returns.std() > 0 and rewards.std() > 0:
            correlation = round(float(np.corrcoef(returns, rewards)[0, 1]), 4)
    return {"oracle_mean_return": oracle_return, "oracle_mean_reward": oracle_reward, "farmed": farmed,
            "correlation": correlation, "rollouts": len(pairs)}


def determinism_figures(rows: list[dict]) -> dict:
    """Pairs (task, seed) run twice by the same deterministic agent (the `random` probe's episode and
    the determinism run's; an older audit's determinism run holds both); each divergent pair with its
    first divergent step (the rerun comparison of runs/selectors.py)."""
    by_key: dict = {}
    for row in rows:
        if row["status"] in DONE_STATUSES:
            by_key.setdefault((row["task_id"], row["seed"]), []).append(row)
    pairs, divergent = 0, []
    for (task_id, seed), pair in sorted(by_key.items()):
        if len(pair) < 2:
            continue
        pairs += 1
        a, b = (Rollout.objects.get(pk=row["id"]) for row in pair[:2])
        result = compare_trajectories(a, b)
        if not result["identical"]:
            divergent.append({
                "task_id": task_id, "seed": seed, "first_divergent_step": result["first_divergence"],
                "reason": result["reason"], "rollouts": [a.pk, b.pk],
            })
    return {"pairs": pairs, "identical": pairs - len(divergent), "divergent": divergent}


def pass_at_k(n: int, c: int, k: int) -> float | None:
    return None if k > n else round(1 - comb(n - c, k) / comb(n, k), 4)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    return None if k > n else round(comb(c, k) / comb(n, k), 4)


def difficulty_agent(*, rows: list[dict], oracle: str | None = None) -> str | None:
    """The one agent whose pass rates say how hard tasks are: the oracle when it has done rollouts, else the
    evaluation agent that passes most often (ties by name); None when neither has any. Pooling agents would
    mix probes, random play and solvers into one meaningless rate."""
    agents = {row["agent"] for row in rows if row["status"] in DONE_STATUSES}
    if oracle is not None and oracle in agents:
        return oracle
    rates: dict = {}
    for row in rows:
        if row["status"] in DONE_STATUSES and row.get("purpose", RunPurpose.EVALUATION) == RunPurpose.EVALUATION:
            counts = rates.setdefault(row["agent"], [0, 0])
            counts[0] += 1
            counts[1] += passed(row["status"])
    best = sorted(rates.items(), key=lambda item: (-item[1][1] / item[1][0], item[0]))
    return best[0][0] if best else None


def difficulty_figures(*, tasks: list[dict], rows: list[dict], agent: str | None = None) -> dict:
    """Pass rate by difficulty (non-monotone levels flagged), never and always solved tasks and a suggested
    re-levelling by observed pass rate, all of `agent`'s rollouts alone when given (difficulty_agent);
    pass@k and pass^k per task and agent, and metrics per split with each agent's train-test gap, over every
    row. `rows` carry an `agent` name."""
    meta = {str(task.get("id")): task for task in tasks}
    done = [row for row in rows if row["status"] in DONE_STATUSES and row["task_id"] in meta]
    levels: dict = {}
    per_task: dict = {}
    per_agent_task: dict = {}
    splits: dict = {}
    for row in done:
        task = meta[row["task_id"]]
        ok = passed(row["status"])
        if agent is None or row["agent"] == agent:
            level = levels.setdefault(task.get("difficulty"), [0, 0])
            level[0] += 1
            level[1] += ok
            counts = per_task.setdefault(row["task_id"], [0, 0])
            counts[0] += 1
            counts[1] += ok
        counts = per_agent_task.setdefault((row["agent"], row["task_id"]), [0, 0])
        counts[0] += 1
        counts[1] += ok
        split = {"train": "train", "test": "test", "eval": "test"}.get(task.get("split"))  # eval: the held-out name
        if split is not None:
            counts = splits.setdefault(row["agent"], {}).setdefault(split, [0, 0])
            counts[0] += 1
            counts[1] += ok

    def level_key(value):
        return (0, float(value)) if isinstance(value, (int, float)) else (1, 0.0)

    by_level = [
        {"difficulty": level, "rollouts": n, "pass_rate": round(c / n, 4) if n else None}
        for level, (n, c) in sorted(levels.items(), key=lambda item: level_key(item[0]))
    ]
    non_monotone = []
    numbered = [entry for entry in by_level if isinstance(entry["difficulty"], (int, float))]
    for easier, harder in zip(numbered, numbered[1:]):
        if harder["pass_rate"] is not None and easier["pass_rate"] is not None and harder["pass_rate"] > easier["pass_rate"]:
            non_monotone.append({"easier": easier["difficulty"], "harder": harder["difficulty"],
                                 "easier_pass_rate": easier["pass_rate"], "harder_pass_rate": harder["pass_rate"]})
    never = sorted(task_id for task_id, (n, c) in per_task.items() if c == 0)
    always = sorted(task_id for task_id, (n, c) in per_task.items() if c == n)
    reliability = [
        {"agent": agent, "task_id": task_id, "n": n, "passes": c,
         "pass_at_k": {str(k): pass_at_k(n, c, k) for k in PASS_AT_K if k <= n},
         "pass_hat_k": {str(k): pass_hat_k(n, c, k) for k in PASS_AT_K if k <= n}}
        for (agent, task_id), (n, c) in sorted(per_agent_task.items())
    ]
    split_rows = []
    for agent, by_split in sorted(splits.items()):
        rates = {split: round(c / n, 4) for split, (n, c) in by_split.items() if n}
        gap = round(rates["train"] - rates["test"], 4) if "train" in rates and "test" in rates else None
        split_rows.append({"agent": agent, "pass_rate": rates, "train_test_gap": gap})
    return {
        "agent": agent,
        "levels": by_level,
        "non_monotone": non_monotone,
        "never_solved": never,
        "always_solved": always,
        "pass_at_k": reliability,
        "splits": split_rows,
        "relevel": suggested_levels(tasks=tasks, per_task=per_task),
    }


def suggested_levels(*, tasks: list[dict], per_task: dict) -> list[dict]:
    """Tasks ordered by observed pass rate (highest first) take the version's levels in order, each
    level keeping its number of tasks: a suggestion where it differs from the declared level."""
    declared = sorted((task.get("difficulty") for task in tasks if isinstance(task.get("difficulty"), (int, float))))
    observed = sorted(
        ((c / n, task_id) for task_id, (n, c) in per_task.items() if n),
        key=lambda item: (-item[0], item[1]),
    )
    if len(observed) != len(declared) or not observed:
        return []
    meta = {str(task.get("id")): task for task in tasks}
    suggestions = []
    for (rate, task_id), level in zip(observed, declared):
        if meta[task_id].get("difficulty") != level:
            suggestions.append({"task_id": task_id, "difficulty": meta[task_id].get("difficulty"),
                                "suggested": level, "pass_rate": round(rate, 4)})
    return suggestions


def difficulty_order(*, tasks: list[dict], rows: list[dict], exclude: str | None = None) -> dict:
    """Do the declared levels rank the tasks? Judged from agents that are not the oracle (an oracle passes
    everything, so it cannot tell levels apart): for each such agent, the rank agreement between a rollout's
    declared level and its failing, Spearman's rho over its done rollouts (+1: harder levels always fail more;
    -1: the levels run backwards), with a one-sided permutation p-value (PERMUTATIONS relabellings, fixed
    seed) for "runs backwards". The judged agent is the one with most done rollouts among those whose outcome
    varies; its pass rate per level and the re-levelling its pass rates suggest come with it. `rows` carry an
    `agent`; `exclude` is the oracle's name."""
    meta = {str(task.get("id")): task for task in tasks}
    levelled = {task_id for task_id, task in meta.items() if isinstance(task.get("difficulty"), (int, float))
                and not isinstance(task.get("difficulty"), bool)}
    by_agent: dict = {}
    for number, row in enumerate(rows):
        if row["status"] in DONE_STATUSES and row["task_id"] in levelled and row["agent"] != exclude:
            # One row per rollout, whichever list it came in (rows without an id are each their own).
            by_agent.setdefault(row["agent"], {})[row.get("id", ("row", number))] = row
    agents = []
    for agent, by_id in sorted(by_agent.items()):
        done = list(by_id.values())
        levels = np.array([float(meta[row["task_id"]]["difficulty"]) for row in done])
        fails = np.array([0.0 if passed(row["status"]) else 1.0 for row in done])
        entry = {"agent": agent, "rollouts": len(done), "agreement": None, "p_backwards": None}
        if len(set(levels.tolist())) > 1 and 0 < fails.sum() < fails.size:
            entry["agreement"], entry["p_backwards"] = _rank_agreement(levels, fails)
        agents.append(entry)
    judged = max((entry for entry in agents if entry["agreement"] is not None),
                 key=lambda entry: (entry["rollouts"], entry["agent"]), default=None)
    result = {"agent": None, "rollouts": 0, "agreement": None, "p_backwards": None, "levels": [], "relevel": [],
              "agents": agents, "verdict": "no signal"}
    if judged is None:
        return result
    figures = difficulty_figures(tasks=tasks, rows=list(by_agent[judged["agent"]].values()), agent=judged["agent"])
    result.update(judged)
    result["levels"], result["relevel"] = figures["levels"], figures["relevel"]
    if judged["agreement"] <= ORDER_BACKWARDS and judged["p_backwards"] <= ORDER_P_RED:
        result["verdict"] = "backwards"
    elif judged["agreement"] < ORDER_WEAK and judged["p_backwards"] <= ORDER_P_AMBER:
        result["verdict"] = "weak"
    else:
        result["verdict"] = "ranked"
    return result


def _rank_agreement(levels, fails) -> tuple[float, float]:
    """Spearman's rho of levels against fails (average ranks for ties) and the share of relabellings of the
    fails whose rho is at most the observed one ((count + 1) / (N + 1), never exactly 0)."""
    def ranks(values):
        order = values.argsort(kind="stable")
        ranked = np.empty(values.size)
        ranked[order] = np.arange(1, values.size + 1)
        for value in np.unique(values):
            ranked[values == value] = ranked[values == value].mean()
        return ranked

    x, y = ranks(levels), ranks(fails)
    x, y = x - x.mean(), y - y.mean()
    rho = float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))
    rng = np.random.default_rng(0)
    shuffled = y[np.argsort(rng.random((PERMUTATIONS, y.size)), axis=1)]
    rhos = (shuffled * x).sum(axis=1) / np.sqrt((x * x).sum() * (y * y).sum())
    p_value = float((np.sum(rhos <= rho + 1e-12) + 1) / (PERMUTATIONS + 1))
    return round(rho, 4), round(p_value, 4)


# -- the report and its card ----------------------------------------------------------------------


def audit_report(*, audit, regression: dict | None = None, answers: dict | None = None,
                 consistency: dict | None = None, portability: dict | None = None) -> dict:
    """The audit's document (as `audit_version --json` prints it), from its runs' rollouts."""
    version = audit.environment_version
    manifest = version.manifest
    task_ids = [str(task.get("id")) for task in version.tasks]
    roles = list(audit.audit_runs.select_related("run__agent").order_by("id"))
    probes, oracle, oracle_rows, determinism, weak_rows = [], None, [], None, []
    oracle_agent = next((entry.run.agent.name for entry in roles if entry.role == AuditRole.ORACLE), None)
    pair_runs = [entry.run_id for entry in roles if entry.role == AuditRole.DETERMINISM]
    for entry in roles:
        rows = _rows([entry.run_id])
        if entry.role == AuditRole.PROBE:
            probes.append(probe_figures(name=entry.name, rows=rows, threshold=probe_threshold(manifest, entry.name)))
            if entry.name == "random" and entry.run.agent.kind == AgentKind.RANDOM:
                pair_runs.append(entry.run_id)  # the first episode of each determinism pair
                weak_rows += [{**row, "agent": entry.run.agent.name} for row in rows]  # a non-oracle agent for difficulty order
        elif entry.role == AuditRole.ORACLE:
            oracle_rows = rows
            oracle = oracle_figures(rows, task_ids, stochastic=stochastic_tasks(manifest))
    determinism = determinism_figures(_rows(pair_runs)) if pair_runs else {"pairs": 0, "identical": 0, "divergent": []}
    rows = version_rows(version=version)
    difficulty = difficulty_figures(tasks=version.tasks, rows=rows, agent=difficulty_agent(rows=rows, oracle=oracle_agent))
    report = {
        "audit": audit.pk,
        "version": version.label,
        "seeds": audit.seeds,
        "probes": probes,
        "oracle": oracle,
        "determinism": determinism,
        "difficulty": difficulty["levels"],
        "transfer": {key: value for key, value in difficulty.items() if key != "levels"},
        "order": difficulty_order(tasks=version.tasks, rows=rows + weak_rows, exclude=oracle_agent),
        "regression": regression,
        "answers": answers,
        "consistency": consistency,
        "portability": portability,
        "returns": return_figures(probes=probes, oracle_rows=oracle_rows, rows=_rows([entry.run_id for entry in roles])),
        "leaks": leak_figures(audit=audit),
    }
    report["lines"] = card_lines(report)
    report["flags"] = [line["text"] for line in report["lines"] if line["level"] != GREEN]
    report["checks"] = check_summary(report["lines"])
    report["status"] = report_status(report["lines"])
    return report


def version_rows(*, version) -> list[dict]:
    """Done rollouts of the version for difficulty: its evaluations and its audits' oracle runs; never hack
    probes (which must fail), determinism pairs (random play), sessions or plays."""
    from .models import AuditRun

    oracle_runs = AuditRun.objects.filter(role=AuditRole.ORACLE, run__environment_version=version).values("run_id")
    rows = (
        Rollout.objects.filter(run__environment_version=version, status__in=DONE_STATUSES)
        .filter(Q(run__purpose=RunPurpose.EVALUATION) | Q(run_id__in=oracle_runs))
        .values("id", "task_id", "status", "run__agent__name", "run__purpose")
    )
    return [{**row, "agent": row["run__agent__name"], "purpose": row["run__purpose"]} for row in rows]


def compared_with_parent(report: dict, parent_report: dict | None) -> list[str]:
    """Sentences on what changed since the parent version's latest report."""
    if not parent_report:
        return []
    sentences = []
    before = {probe["name"]: probe for probe in parent_report.get("probes", [])}
    for probe in report.get("probes", []):
        old = before.get(probe["name"])
        if old and old["mean_reward"] is not None and probe["mean_reward"] is not None and old["mean_reward"] != probe["mean_reward"]:
            sentences.append(f"probe `{probe['name']}` went from {old['mean_reward']:.2f} to {probe['mean_reward']:.2f}")
    old_oracle, oracle = parent_report.get("oracle"), report.get("oracle")
    if old_oracle and oracle and old_oracle["solved"] != oracle["solved"]:
        sentences.append(f"the oracle solves {oracle['solved']}/{oracle['tasks']} tasks (was {old_oracle['solved']}/{old_oracle['tasks']})")
    old_det, det = parent_report.get("determinism") or {}, report.get("determinism") or {}
    if len(old_det.get("divergent", [])) != len(det.get("divergent", [])):
        sentences.append(f"divergent pairs went from {len(old_det.get('divergent', []))} to {len(det.get('divergent', []))}")
    if parent_report.get("status") != report.get("status"):
        sentences.append(f"the audit went from {parent_report.get('status')} to {report.get('status')}")
    return sentences


# -- verifier regression --------------------------------------------------------------------------


def regression_figures(cases: list[dict]) -> dict:
    """cases: {rollout, human_pass, new_reward (None when the replay failed), note}."""
    judged = [case for case in cases if case["new_reward"] is not None]
    flipped = [case for case in judged if (case["new_reward"] > 0) != case["human_pass"]]
    return {
        "cases": len(judged),
        "unreplayable": [case for case in cases if case["new_reward"] is None],
        "agreement": round(1 - len(flipped) / len(judged), 4) if judged else None,
        "flipped": flipped,
    }


# -- version A/B ----------------------------------------------------------------------------------


def ab_figures(*, a_rows: list[dict], b_rows: list[dict], bins: int = 10) -> dict:
    """Two sets of done rollouts on the same tasks (rows: task_id, verifier_reward): histograms on
    common edges, per-task differences, mean difference with bootstrap CI and permutation p-value."""
    common = {row["task_id"] for row in a_rows} & {row["task_id"] for row in b_rows}
    a = np.array([row["verifier_reward"] for row in a_rows if row["task_id"] in common and row["verifier_reward"] is not None], float)
    b = np.array([row["verifier_reward"] for row in b_rows if row["task_id"] in common and row["verifier_reward"] is not None], float)
    result = {"tasks": sorted(common), "a": {"n": int(a.size)}, "b": {"n": int(b.size)}, "per_task": [],
              "mean_difference": None, "ci95": None, "p_value": None, "histogram": None}
    if not a.size or not b.size:
        return result
    result["a"]["mean"], result["b"]["mean"] = round(float(a.mean()), 4), round(float(b.mean()), 4)
    lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    if hi == lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bins + 1)
    result["histogram"] = {
        "edges": [round(float(edge), 4) for edge in edges],
        "a": np.histogram(a, edges)[0].tolist(),
        "b": np.histogram(b, edges)[0].tolist(),
    }
    for task_id in sorted(common):
        ta = [row["verifier_reward"] for row in a_rows if row["task_id"] == task_id and row["verifier_reward"] is not None]
        tb = [row["verifier_reward"] for row in b_rows if row["task_id"] == task_id and row["verifier_reward"] is not None]
        ma = round(sum(ta) / len(ta), 4) if ta else None
        mb = round(sum(tb) / len(tb), 4) if tb else None
        result["per_task"].append({"task_id": task_id, "a": ma, "b": mb,
                                   "difference": None if ma is None or mb is None else round(mb - ma, 4)})
    difference = float(b.mean() - a.mean())
    rng = np.random.default_rng(0)
    boot = rng.choice(b, (BOOTSTRAP_RESAMPLES, b.size)).mean(axis=1) - rng.choice(a, (BOOTSTRAP_RESAMPLES, a.size)).mean(axis=1)
    pooled = np.concatenate([a, b])
    perms = np.argsort(rng.random((PERMUTATIONS, pooled.size)), axis=1)
    shuffled = pooled[perms]
    diffs = shuffled[:, a.size:].mean(axis=1) - shuffled[:, :a.size].mean(axis=1)
    result["mean_difference"] = round(difference, 4)
    result["ci95"] = [round(float(np.percentile(boot, 2.5)), 4), round(float(np.percentile(boot, 97.5)), 4)]
    # (count + 1) / (N + 1): a permutation p-value is never exactly 0.
    result["p_value"] = round(float((np.sum(np.abs(diffs) >= abs(difference) - 1e-12) + 1) / (PERMUTATIONS + 1)), 4)
    return result
