"""Lenient verifiers in one-shot episodes, each caught by exactly its probe: a success flag believed
(`claim`, whose candidates rotate across episodes), a list of numbers accepted when one is right
(`shotgun`), the first number read and the rest ignored (`perturb`), any task's answer accepted
(`cross`), and the format checked but not the value (`junk`). The clean controls stay green on them.
Rollouts run in this process (the Celery task bodies); the answer probes replay in one sandbox."""
import pytest
from django.urls import reverse

from runs.quality import answers, services

from tests.conftest import login
from tests.quality.audits import play_audit
from tests.quality.test_judgement import line_of, not_green

pytestmark = pytest.mark.django_db(transaction=True)


def red_lines(audit) -> set[str]:
    return {line["check"] for line in audit.report["lines"] if line["level"] != "green"}


def answer_probe(audit, name) -> dict:
    return next(probe for probe in audit.report["answers"]["probes"] if probe["name"] == name)


FIRST_TASK = {"tasks.jsonl": '{"id": "add", "difficulty": 1, "a": 38, "op": "+", "b": 49, "answer": 87}\n'}


def test_a_success_flag_in_a_one_answer_quiz_is_found_by_the_rotating_claim_probe(make_version, owner):
    version = make_version("quiz_success_flag", extra=FIRST_TASK)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1, 2, 3, 4]))
    assert audit.status == "flagged" and red_lines(audit) == {"probe:claim"}, audit.report["lines"]
    claim = next(probe for probe in audit.report["probes"] if probe["name"] == "claim")
    # Each of the five episodes led with another kind of claim; the success flag led one of them.
    assert claim["mean_reward"] == pytest.approx(0.2)
    first_actions = [rollout.steps.get(index=0).action for rollout in
                     audit.audit_runs.get(name="claim").run.rollouts.order_by("seed")]
    assert len({repr(action)[:40] for action in first_actions}) == 5
    assert any(isinstance(action, dict) and action.get("success") is True for action in first_actions)


@pytest.mark.parametrize("package, probe, said", [
    ("quiz_any_number", "shotgun", "0 1 2 3 4 5"),
    ("quiz_first_number", "perturb", "87 zq xylo 7"),
    ("quiz_answer_key", "cross", "391"),
])
def test_a_lenient_one_answer_verifier_is_red_on_its_answer_probe_alone(make_version, owner, package, probe, said):
    version = make_version(package)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "flagged" and red_lines(audit) == {f"answer:{probe}"}, audit.report["lines"]
    found = answer_probe(audit, probe)
    assert found["flagged"] and found["instances"] == 4 and found["passed"] >= 2
    assert said in found["example"]["said"]
    line = line_of(audit, "probe.answer")
    assert f"Answer probe `{probe}` passes where it must fail" in line["text"] and said in line["text"]
    # Every other answer probe played and the verifier refused it.
    others = [entry for entry in audit.report["answers"]["probes"] if entry["name"] != probe]
    assert all(entry["instances"] == 4 and not entry["flagged"] for entry in others), others


def test_a_format_only_verifier_is_red_on_schema_valid_junk(make_version, owner, owner_api):
    version = make_version("quiz_format")
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "flagged" and red_lines(audit) == {"answer:junk"}, audit.report["lines"]
    junk = answer_probe(audit, "junk")
    # The schema's pattern ^[0-9]{3}$ is honoured, and the junk is not the answer (391).
    assert junk["passed"] == 2 and junk["example"]["said"] == "000"
    assert answer_probe(audit, "cross")["skipped"].startswith("one task")
    # The API and the page say it; the page escapes the example answer.
    team = version.environment.team.slug
    api = owner_api.get(f"/audits/{audit.pk}")
    assert api.status_code == 200 and api.json()["status"] == "flagged"
    assert any(line["check"] == "answer:junk" and line["level"] == "red" for line in api.json()["report"]["lines"])
    page = login(owner).get(reverse("quality:audit", kwargs={"team": team, "audit_id": audit.pk})).content.decode()
    assert "Answer probe <code>junk</code> passes where it must fail" in page and "<code>000</code>" in page


def test_the_clean_controls_refuse_every_answer_probe(make_version, owner):
    for package in ("arithmetic_quiz", "sorting"):
        audit = play_audit(services.audit_start(version=make_version(package), actor=owner, seeds=[0]))
        assert audit.status == "passed" and not_green(audit) == set(), audit.report["lines"]
        probes = {probe["name"]: probe for probe in audit.report["answers"]["probes"]}
        assert set(probes) == set(answers.ANSWER_PROBES)
        assert all(probe["instances"] == 2 and probe["passed"] == 0 for probe in probes.values()), probes


# -- the answers, without a sandbox ---------------------------------------------------------------


def test_schema_valid_junk_honours_format_pattern_enum_and_range_and_avoids_the_answer():
    schema = {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"}, "code": {"type": "string", "pattern": r"^[A-Z]{2}-\d{4}$"},
        "level": {"enum": ["low", "high"]}, "count": {"type": "integer", "minimum": 3, "maximum": 9},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}}}
    junk = answers.junk_value(schema, avoid={"low", "3"})
    assert junk == {"day": "2001-02-03", "code": "AA-0000", "level": "high", "count": 9, "tags": ["lorem ipsum dolor"] * 2}
    assert answers.junk_value({"type": "integer"}, avoid={"1"}, space={"type": "discrete", "n": 10, "start": 1}) == 10
    assert answers.junk_value({"const": "x"}, avoid=set()) is answers.NO_JUNK


def test_a_shotgun_answer_holds_the_range_the_tokens_and_the_choices():
    sets = answers.shotgun_sets(visible={"a": 38, "b": 49}, observation="What is 38 + 49?", space={"type": "discrete", "n": 500},
                                tools=[{"name": "answer", "parameters": {"properties": {"unit": {"enum": ["kg", "lb"]}}}}])
    assert sets["integers"].split() == [str(number) for number in range(500)]
    assert {"38", "49", "What"} <= set(sets["tokens"].split()) and sets["choices"] == "kg lb"
    assert sets["all"].startswith("0 1 2") and sets["all"].endswith("kg lb")


def test_the_page_escapes_an_example_answer_on_its_line_and_in_its_table(make_version, owner, team):
    from runs.quality.card import card_lines
    from runs.quality.models import Audit

    version = make_version("arithmetic_quiz")
    hostile = '<img src=x onerror="alert(1)">'
    probe = answers.probe_summary("shotgun", [{"task_id": "add", "seed": 0, "reward": 1.0, "reason": "right <b>answer</b>",
                                               "answer": {"tool": "answer", "arguments": {"answer": hostile}}, "errors": []}], threshold=0.05)
    report = {"probes": [], "oracle": None, "determinism": {"pairs": 1, "identical": 1, "divergent": []}, "difficulty": [],
              "transfer": {"non_monotone": [], "never_solved": [], "always_solved": [], "pass_at_k": [], "splits": [], "relevel": []},
              "answers": {"applies": True, "why_not": "", "probes": [probe]}}
    report["lines"] = card_lines(report)
    assert any(line["check"] == "answer:shotgun" and line["level"] == "red" and hostile in line["text"] for line in report["lines"])
    audit = Audit.objects.create(team=team, environment_version=version, status="flagged", seeds=[0], report=report)
    page = login(owner).get(reverse("quality:audit", kwargs={"team": team.slug, "audit_id": audit.pk})).content.decode()
    assert hostile not in page and "right <b>" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page and "<h3>Answer probes</h3>" in page
