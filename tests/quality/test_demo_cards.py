"""Demo environments get a green card, and the probes act in each kind's own terms. A browser demo
(one task, one seed, Chromium in this process): noop says done without touching the page, claim types
its claim into the fields and claims success, peek tries the package's files, file URLs and other
origins; none earns anything, since the verifier reads the site's real state."""
import json

import pytest

from environments.demo import DEMO_DIR
from runs.models import Step
from runs.quality import services

from tests.quality.audits import play_audit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def steps_of(audit, name):
    run = audit.audit_runs.get(name=name).run
    return list(Step.objects.filter(rollout__run=run).order_by("rollout_id", "index").values("action", "info"))


def test_web_form_gets_a_green_card_from_probes_that_act_on_its_page(make_version, owner):
    first_task = (DEMO_DIR / "web_form" / "tasks.jsonl").read_text().splitlines()[0]
    # Its first task only, and episodes of at most 12 steps (the random agent would take all 30).
    manifest = (DEMO_DIR / "web_form" / "environment.toml").read_text().replace("max_steps = 30", "max_steps = 12")
    version = make_version("web_form", extra={"tasks.jsonl": first_task + "\n", "environment.toml": manifest})
    assert version.manifest["max_steps"] == 12
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == "passed", audit.report["flags"]
    assert [line["level"] for line in audit.report["lines"]] == ["green"] * len(audit.report["lines"]), audit.report["lines"]
    assert {probe["name"]: probe["mean_reward"] for probe in audit.report["probes"]} == {
        "noop": 0.0, "random": 0.0, "claim": 0.0, "peek": 0.0}

    assert [step["action"] for step in steps_of(audit, "noop")] == [{"action": "done", "answer": ""}]
    claim = steps_of(audit, "claim")
    assert any(step["action"]["action"] == "fill" and "PASSED" in step["action"]["value"] for step in claim)
    assert claim[-1]["action"]["action"] == "done" and "correct" in claim[-1]["action"]["answer"]
    peek = steps_of(audit, "peek")
    tried = [step["action"]["url"] for step in peek if step["action"]["action"] == "goto"]
    assert "/env.py" in tried and "file:///etc/passwd" in tried and "http://example.org/" in tried
    # The site serves none of the package's files and every other origin is blocked: nothing found.
    assert peek[-1]["action"] == {"action": "done", "answer": ""}, json.dumps(peek[-1])
