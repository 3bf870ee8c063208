"""The quality figures (runs/quality/report.py) on hand-made rollouts: no sandbox, no database."""
import numpy as np
import pytest

from runs.quality import report


def rows(agent, task_id, outcomes):
    return [{"agent": agent, "task_id": task_id, "status": "succeeded" if ok else "failed"} for ok in outcomes]


def test_pass_at_k_and_pass_hat_k_follow_their_definitions():
    # 10 tries, 3 passes: at least one of 2 draws passes 1 - C(7,2)/C(10,2); both pass C(3,2)/C(10,2).
    assert report.pass_at_k(10, 3, 2) == round(1 - 21 / 45, 4)
    assert report.pass_hat_k(10, 3, 2) == round(3 / 45, 4)
    assert report.pass_at_k(3, 0, 1) == 0.0 and report.pass_hat_k(3, 3, 3) == 1.0
    assert report.pass_at_k(2, 1, 5) is None  # k above the number of tries has no value


def test_a_harder_level_that_passes_more_often_is_flagged_and_relevelled():
    tasks = [{"id": "easy", "difficulty": 1}, {"id": "hard", "difficulty": 2}]
    figures = report.difficulty_figures(tasks=tasks, rows=rows("a", "easy", [0, 0, 1, 0]) + rows("a", "hard", [1, 1, 1, 0]))
    assert figures["levels"] == [{"difficulty": 1, "rollouts": 4, "pass_rate": 0.25},
                                 {"difficulty": 2, "rollouts": 4, "pass_rate": 0.75}]
    assert figures["non_monotone"] == [{"easier": 1, "harder": 2, "easier_pass_rate": 0.25, "harder_pass_rate": 0.75}]
    assert {(r["task_id"], r["suggested"]) for r in figures["relevel"]} == {("hard", 1), ("easy", 2)}
    lines = report.card_lines({"probes": [], "oracle": None, "determinism": {"pairs": 0, "divergent": []},
                               "transfer": figures, "difficulty": figures["levels"]})
    assert next(line for line in lines if line["check"] == "difficulty")["level"] == "amber"


def test_difficulty_is_one_agents_pass_rates_never_probes_or_random_play_pooled_with_solvers():
    tasks = [{"id": "easy", "difficulty": 1}, {"id": "hard", "difficulty": 2}]
    # The solver finds easy easier; random play fails easy and is lucky on hard, which pooled would invert the levels.
    solver = rows("solver", "easy", [1, 1, 1, 1]) + rows("solver", "hard", [1, 0, 0, 0])
    noise = rows("random", "easy", [0] * 12) + rows("random", "hard", [1] * 6 + [0] * 6)
    pooled = report.difficulty_figures(tasks=tasks, rows=solver + noise)
    assert pooled["non_monotone"]  # what pooling every agent said
    agent = report.difficulty_agent(rows=solver + noise)
    assert agent == "solver"  # the evaluation agent that passes most often
    figures = report.difficulty_figures(tasks=tasks, rows=solver + noise, agent=agent)
    assert figures["agent"] == "solver" and figures["non_monotone"] == [] and figures["relevel"] == []
    assert figures["levels"] == [{"difficulty": 1, "rollouts": 4, "pass_rate": 1.0}, {"difficulty": 2, "rollouts": 4, "pass_rate": 0.25}]
    assert {row["agent"] for row in figures["pass_at_k"]} == {"solver", "random"}  # still per agent
    # The oracle, when it played, is the one used; the card names it.
    oracle = rows("guess-oracle", "easy", [1, 1]) + rows("guess-oracle", "hard", [1, 0])
    assert report.difficulty_agent(rows=solver + noise + oracle, oracle="guess-oracle") == "guess-oracle"
    lines = report.card_lines({"probes": [], "oracle": None, "determinism": {"pairs": 0, "divergent": []},
                               "transfer": figures, "difficulty": figures["levels"]})
    assert "(agent solver)" in next(line for line in lines if line["check"] == "difficulty")["text"]
    assert report.difficulty_agent(rows=[]) is None


def test_never_and_always_solved_tasks_and_the_train_test_gap():
    tasks = [{"id": "a", "difficulty": 1, "split": "train"}, {"id": "b", "difficulty": 1, "split": "test"},
             {"id": "c", "difficulty": 2, "split": "test"}]
    figures = report.difficulty_figures(
        tasks=tasks, rows=rows("bot", "a", [1, 1]) + rows("bot", "b", [0, 1]) + rows("bot", "c", [0, 0]))
    assert figures["always_solved"] == ["a"] and figures["never_solved"] == ["c"]
    assert figures["splits"] == [{"agent": "bot", "pass_rate": {"train": 1.0, "test": 0.25}, "train_test_gap": 0.75}]


def test_ab_finds_a_real_difference_with_an_interval_that_excludes_zero():
    a = [{"task_id": f"t{i % 5}", "verifier_reward": 0.0 if i % 4 else 1.0} for i in range(40)]
    b = [{"task_id": f"t{i % 5}", "verifier_reward": 1.0 if i % 4 else 0.0} for i in range(40)]
    result = report.ab_figures(a_rows=a, b_rows=b)
    assert result["mean_difference"] == 0.5
    assert 0 < result["ci95"][0] < 0.5 < result["ci95"][1]
    assert result["p_value"] < 0.01
    assert sum(result["histogram"]["a"]) == 40 and result["histogram"]["b"][-1] == 30


def test_ab_of_identical_sides_shows_no_difference():
    side = [{"task_id": "t1", "verifier_reward": float(v)} for v in np.linspace(0, 1, 20)]
    result = report.ab_figures(a_rows=side, b_rows=list(side))
    assert result["mean_difference"] == 0.0 and result["p_value"] > 0.9
    assert result["ci95"][0] <= 0 <= result["ci95"][1]


def test_ab_compares_only_tasks_both_sides_ran():
    result = report.ab_figures(a_rows=[{"task_id": "x", "verifier_reward": 1.0}], b_rows=[{"task_id": "y", "verifier_reward": 0.0}])
    assert result["tasks"] == [] and result["mean_difference"] is None


@pytest.mark.parametrize("manifest, expected", [
    ({}, 0.05), ({"quality": {"probe_threshold": 0.2}}, 0.2),
    ({"quality": {"probe_threshold": 0.2, "probe_thresholds": {"random": 1.0}}}, 1.0),
])
def test_probe_thresholds_are_settable_per_version(manifest, expected):
    assert report.probe_threshold(manifest, "random") == expected


def test_the_card_compares_with_the_parents_report():
    parent = {"status": "passed", "probes": [{"name": "claim", "mean_reward": 0.0}], "oracle": None, "determinism": {}}
    child = {"status": "flagged", "probes": [{"name": "claim", "mean_reward": 0.8}], "oracle": None, "determinism": {}}
    assert report.compared_with_parent(child, parent) == [
        "probe `claim` went from 0.00 to 0.80", "the audit went from passed to flagged"]


def order_report(order):
    return {"probes": [], "oracle": None, "determinism": {"pairs": 0, "divergent": []}, "order": order,
            "transfer": {"non_monotone": [], "agent": None}, "difficulty": order["levels"]}


def test_difficulty_order_is_judged_on_an_agent_that_is_not_the_oracle_and_red_when_it_runs_backwards():
    tasks = [{"id": "wide", "difficulty": 1}, {"id": "mid", "difficulty": 2}, {"id": "narrow", "difficulty": 3}]
    oracle = rows("oracle", "wide", [1] * 5) + rows("oracle", "mid", [1] * 5) + rows("oracle", "narrow", [1] * 5)
    backwards = rows("random", "wide", [0] * 5) + rows("random", "mid", [0, 1, 0, 0, 1]) + rows("random", "narrow", [1] * 5)
    order = report.difficulty_order(tasks=tasks, rows=oracle + backwards, exclude="oracle")
    assert order["agent"] == "random" and order["verdict"] == "backwards"
    assert order["agreement"] < -0.5 and order["p_backwards"] <= 0.05
    assert [entry["pass_rate"] for entry in order["levels"]] == [0.0, 0.4, 1.0]
    assert {(r["task_id"], r["suggested"]) for r in order["relevel"]} == {("narrow", 1), ("wide", 3)}
    line = next(line for line in report.card_lines(order_report(order)) if line["id"] == "difficulty")
    assert line["level"] == "red" and "run backwards" in line["text"] and "narrow 3→1" in line["text"]
    # The same outcomes the right way round are green; the oracle alone says nothing (it passes everything).
    ranked = rows("random", "wide", [1] * 5) + rows("random", "mid", [0, 1, 0, 0, 1]) + rows("random", "narrow", [0] * 5)
    order = report.difficulty_order(tasks=tasks, rows=oracle + ranked, exclude="oracle")
    assert order["verdict"] == "ranked" and order["agreement"] > 0.5
    assert next(line for line in report.card_lines(order_report(order)) if line["id"] == "difficulty")["level"] == "green"
    assert report.difficulty_order(tasks=tasks, rows=oracle, exclude="oracle")["verdict"] == "no signal"
    assert report.difficulty_order(tasks=tasks, rows=oracle)["verdict"] == "no signal"  # no variance either


def test_difficulty_order_is_not_fooled_by_noise_and_leans_amber_only_on_evidence():
    tasks = [{"id": "a", "difficulty": 1}, {"id": "b", "difficulty": 2}]
    # One lucky rollout on the harder task out of few: no evidence that the levels run backwards.
    noisy = rows("random", "a", [0, 0, 1]) + rows("random", "b", [0, 1, 1])
    order = report.difficulty_order(tasks=tasks, rows=noisy)
    assert order["agreement"] < 0 and order["p_backwards"] > 0.1 and order["verdict"] == "ranked"
    line = next(line for line in report.card_lines(order_report(order)) if line["id"] == "difficulty")
    assert line["level"] == "green" and "do not clearly run backwards" in line["text"]
    # Many rollouts leaning the wrong way: amber, with the suggestion.
    leaning = rows("random", "a", [1] * 8 + [0] * 12) + rows("random", "b", [1] * 14 + [0] * 6)
    order = report.difficulty_order(tasks=tasks, rows=leaning)
    assert order["verdict"] == "weak", order
    line = next(line for line in report.card_lines(order_report(order)) if line["id"] == "difficulty")
    assert line["level"] == "amber" and "Suggested levels" in line["text"]
