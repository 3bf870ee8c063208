"""The flaws that poison training, each caught by exactly its check (one small audit per flaw class),
and the clean controls (an arithmetic quiz, a sorting task) green on every check. Rollouts run in
this process (the Celery task bodies); figure rules without a sandbox at the end."""
import pytest
from django.urls import reverse

from runs.quality import report, services
from runs.quality.catalogue import CHECKS
from runs.quality.leaks import Secrets, scan

from tests.conftest import login
from tests.quality.audits import play_audit, two_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def not_green(audit) -> set[str]:
    return {line["id"] for line in audit.report["lines"] if line["level"] != "green"}


def line_of(audit, check_id, level="red"):
    return next(line for line in audit.report["lines"] if line["id"] == check_id and line["level"] == level)


@pytest.mark.parametrize("package", ["arithmetic_quiz", "sorting"])
def test_a_clean_control_is_green_on_every_check(make_version, owner, package):
    version = make_version(package)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "passed", audit.report["flags"]
    assert not_green(audit) == set(), audit.report["lines"]
    # Every check that ran is a catalogue id; the leak scan did search (hidden fields and oracle answers).
    assert {line["id"] for line in audit.report["lines"]} <= set(CHECKS)
    assert {"leak", "oracle", "determinism", "probe.reward", "probe.return"} <= {check["id"] for check in audit.report["checks"]}
    assert audit.report["leaks"]["scanned"] > 0 and audit.report["leaks"]["hits"] == []
    assert audit.report["oracle"]["failures"] == [] and audit.report["oracle"]["instances"] == 4


def test_a_hidden_answer_in_the_observation_is_red_with_its_step_and_path(make_version, owner):
    version = make_version("quiz_leak")
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == "flagged" and not_green(audit) == {"leak"}, audit.report["lines"]
    hits = audit.report["leaks"]["hits"]
    assert {(hit["task_id"], hit["where"], hit["path"]) for hit in hits} >= {
        ("add", "reset observation", "meta.check"), ("mul", "reset observation", "meta.check")}
    assert {hit["secret"] for hit in hits} == {"hidden field `answer`", "the oracle's answer"}
    line = line_of(audit, "leak")
    assert "reset observation at `meta.check`" in line["text"] and line["rollout"] is not None
    # The probes never read the observation's meta: they stay unrewarded, only the scan finds it.
    assert all(not probe["flagged"] for probe in audit.report["probes"])
    page = login(owner).get(reverse("quality:audit", kwargs={"team": version.environment.team.slug, "audit_id": audit.pk}))
    assert page.status_code == 200 and "<h3>Leak scan</h3>" in page.content.decode()
    assert "<td>reset observation</td><td><code>meta.check</code></td>" in page.content.decode()


def test_a_farmable_step_reward_is_red_and_shows_return_beside_verifier_reward(make_version, owner):
    version = make_version("guess_farm", extra=two_tasks())
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == "flagged" and not_green(audit) == {"probe.return"}, audit.report["lines"]
    noop = next(probe for probe in audit.report["probes"] if probe["name"] == "noop")
    assert noop["mean_reward"] == 0.0 and noop["mean_return"] == pytest.approx(40 * 0.05)
    assert noop["unearned_return_rollouts"] == noop["rollouts"] == 2
    farmed = {entry["name"]: entry for entry in audit.report["returns"]["farmed"]}
    assert "noop" in farmed and any("reaches the oracle's" in reason for reason in farmed["noop"]["reasons"])
    line = next(line for line in audit.report["lines"] if line["check"] == "probe:noop:return")
    assert line["level"] == "red" and "farms the step reward" in line["text"] and line["rollout"] is not None
    # Every probe line shows its return; the correlation over the audit is reported.
    probe_lines = [line for line in audit.report["lines"] if line["id"] == "probe.reward"]
    assert probe_lines and all("return" in line["text"] for line in probe_lines)
    assert isinstance(audit.report["returns"]["correlation"], float)


def test_an_instance_the_oracle_cannot_solve_is_listed_though_another_seed_passes(make_version, owner):
    first_task = two_tasks()["tasks.jsonl"].splitlines()[0] + "\n"
    version = make_version("guess_cliff", extra={"tasks.jsonl": first_task})
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "flagged" and not_green(audit) == {"oracle"}, audit.report["lines"]
    oracle = audit.report["oracle"]
    assert oracle["unsolved"] == []  # seed 0 passes: the old any-seed rule called this task solved
    assert [(failure["task_id"], failure["seed"], failure["pass_hat_k"]) for failure in oracle["failures"]] == [("t1", 1, 0.0)]
    line = line_of(audit, "oracle")
    assert "fails 1 of 2 instances (t1 seed 1)" in line["text"] and line["rollout"] is not None


# -- the rules, on hand-made figures --------------------------------------------------------------


def lines_for(**report_parts):
    base = {"probes": [], "oracle": None, "determinism": {"pairs": 1, "divergent": []},
            "transfer": {"non_monotone": []}, "difficulty": []}
    return report.card_lines({**base, **report_parts})


def oracle_rows(outcomes):
    return [{"id": index, "task_id": "lake", "seed": seed, "status": "succeeded" if ok else "failed", "error": ""}
            for index, (seed, ok) in enumerate(outcomes)]


@pytest.mark.parametrize("declared, level", [(None, "red"), (["lake"], "amber"), ({"lake": 0.8}, "amber"), ({"lake": 0.5}, "green")])
def test_a_stochastic_task_is_judged_by_its_pass_rate_against_its_floor(declared, level):
    manifest = {"quality": {"stochastic": declared}} if declared else {}
    oracle = report.oracle_figures(oracle_rows([(0, True), (1, False), (2, True)]), ["lake"],
                                   stochastic=report.stochastic_tasks(manifest))
    oracle_lines = [line for line in lines_for(oracle=oracle) if line["id"] == "oracle"]
    assert max((line["level"] for line in oracle_lines), key=["green", "amber", "red"].index) == level
    if declared:
        assert any("passes 67% of its tries" in line["text"] and "fails seed 1" in line["text"] for line in oracle_lines)


def test_the_status_is_one_word_for_the_worst_line():
    assert report.report_status([{"level": "green"}]) == "passed"
    assert report.report_status([{"level": "green"}, {"level": "amber"}]) == "warnings"
    assert report.report_status([{"level": "amber"}, {"level": "red"}]) == "flagged"


def test_the_leak_scan_matches_whole_values_and_ignores_what_the_task_shows():
    secrets = Secrets(task={"id": "t", "low": 1, "high": 10, "answer": "42", "solution": 10}, hidden_fields=["answer", "solution"])

    def found(value):
        return scan([{"task_id": "t", "seed": 0, "where": "reset observation", "value": value}], lambda *_: secrets)["hits"]

    assert found("142 items, 4.2 kg, 42.5 %") == []
    assert [hit["path"] for hit in found({"text": "the answer is 42."})] == ["text"]
    assert found({"hint": "between 1 and 10"}) == []  # 10 is hidden, but the task's range shows it anyway
    assert found({"deep": [{"code": "ANSWER=42"}]})[0]["path"] == "deep[0].code"
    structured = Secrets(task={"id": "s", "items": [3, 1, 2], "solution": [1, 2, 3]}, hidden_fields=["solution"])
    hits = scan([{"task_id": "s", "seed": 0, "where": "step 0 info", "value": {"sorted": [1, 2, 3]}}], lambda *_: structured)["hits"]
    assert [hit["path"] for hit in hits] == ["sorted"]


def test_the_docs_list_every_check_of_the_catalogue_with_its_property():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "quality.md").read_text()
    for check_id, check in CHECKS.items():
        row = next((line for line in docs.splitlines() if line.startswith(f"| `{check_id}` |")), None)
        assert row is not None, f"docs/quality.md lists no check {check_id}"
        assert check["property"] in row and check["rfc"] in row


def first_lines(demo: str, count: int) -> dict:
    from environments.demo import DEMO_DIR

    return {"tasks.jsonl": "\n".join((DEMO_DIR / demo / "tasks.jsonl").read_text().splitlines()[:count]) + "\n"}


def test_inventory_tools_keeps_a_green_card_though_its_tools_reveal_the_answers(make_version, owner):
    """Its hidden answers are what its lookup tools return and what its random choices include: learning,
    not a leak. The scan still searches every reset and the tool specs."""
    version = make_version("inventory_tools", extra=first_lines("inventory_tools", 2))
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == "passed" and not_green(audit) == set(), audit.report["lines"]
    assert audit.report["leaks"]["scanned"] > len(audit.report["probes"]) * 2


def test_frozen_lakes_slippery_task_is_judged_by_its_declared_floor(make_version, owner):
    version = make_version("frozen_lake", extra=first_lines("frozen_lake", 2))  # 4x4, and 4x4 slippery
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "passed" and not_green(audit) == set(), audit.report["lines"]
    line = next(line for line in audit.report["lines"] if line["check"] == "oracle:4x4-slippery")
    assert "declared stochastic: the oracle passes 50% of its tries, floor 40% (fails seed 0)" in line["text"]


def test_difficulty_levels_that_run_backwards_are_red_on_the_card_with_suggested_levels(make_version, owner):
    version = make_version("guess_backwards")
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1, 2, 3, 4]))
    assert audit.status == "flagged" and not_green(audit) == {"difficulty"}, audit.report["lines"]
    order = audit.report["order"]
    # Judged on the audit's random probe, never the oracle (which passes every level alike).
    assert order["agent"] == "random" and order["verdict"] == "backwards"
    assert order["agreement"] <= -0.5 and order["p_backwards"] <= 0.05
    assert all(entry["agent"] != audit.report["transfer"]["agent"] for entry in order["agents"])
    line = line_of(audit, "difficulty")
    assert "run backwards" in line["text"] and "narrow 3→1" in line["text"]
    # The suggestion is on the version's card, not only on the audit page.
    team = version.environment.team.slug
    card = login(owner).get(reverse("quality:card", kwargs={"team": team, "slug": version.environment.slug, "number": version.number}))
    assert card.status_code == 200 and "narrow 3→1" in card.content.decode()
    page = login(owner).get(reverse("quality:audit", kwargs={"team": team, "audit_id": audit.pk})).content.decode()
    assert 'id="difficulty-order"' in page and '<strong id="order-agent">random</strong>' in page


def test_a_verifier_that_believes_a_file_the_agent_can_write_is_red_by_the_tamper_probe(make_version, owner):
    version = make_version("quiz_trusts_report")
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "flagged" and not_green(audit) == {"probe.reward"}, audit.report["lines"]
    flagged = [probe["name"] for probe in audit.report["probes"] if probe["flagged"]]
    assert flagged == ["tamper"]
    line = next(line for line in audit.report["lines"] if line["check"] == "probe:tamper")
    assert line["level"] == "red" and line["rollout"] is not None
    # The probe wrote to the path literal of the package's code, not only to the usual report names.
    code = audit.audit_runs.get(name="tamper").run.agent.code
    assert "'out/verdict.txt'" in code and "reward.txt" in code


def test_the_tamper_probe_is_green_where_the_verifier_ignores_what_was_written_and_absent_without_a_writer(make_version, owner):
    audit = play_audit(services.audit_start(version=make_version("scratch_quiz"), actor=owner, seeds=[0, 1]))
    assert audit.status == "passed" and not_green(audit) == set(), audit.report["lines"]
    assert next(probe for probe in audit.report["probes"] if probe["name"] == "tamper")["mean_reward"] == 0.0
    # An environment with no tool that writes has nothing to forge with: the probe is not played.
    quiz = play_audit(services.audit_start(version=make_version("arithmetic_quiz"), actor=owner, seeds=[0]))
    assert "tamper" not in {probe["name"] for probe in quiz.report["probes"]}
    assert services.tamper_applies({"tools": [{"name": "run_bash", "parameters": {"properties": {"command": {}}}}]})
    assert not services.tamper_applies({"tools": [{"name": "read_file", "parameters": {"properties": {"path": {}}}}]})
