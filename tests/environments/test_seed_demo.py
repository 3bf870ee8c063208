"""seed_demo leaves a first visit something to look at: agents, a finished run, reviewed rollouts."""
import io

import pytest
from django.core.management import call_command

from environments.demo import DEMO_DIR
from runs.figures import run_figures
from runs.models import Agent, LabelSource, RewardLabel, Run


def seed(*args) -> str:
    out = io.StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_seed_demo_loads_the_solving_and_gaming_agents_of_the_demo_packages():
    seed("--no-runs")
    names = set(Agent.objects.filter(team__slug="demo").values_list("name", flat=True))
    assert {"guess-number solver", "web-form solver", "web-form gamer", "web-shop gamer", "pixel-catch solver"} <= names
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # the run's status follows its rollouts on commit
def test_seed_demo_leaves_a_finished_run_with_reviewed_rollouts_once(monkeypatch):
    # One package keeps the test short; the rest run the same code.
    monkeypatch.setattr("environments.management.commands.seed_demo.demo_package_dirs", lambda: [DEMO_DIR / "guess_number"])
    seed()
    (run,) = Run.objects.filter(team__slug="demo")
    figures = run_figures(run)
    assert run.status == "finished" and figures["pending"] == 0 and figures["succeeded"] == figures["total"]
    assert RewardLabel.objects.filter(rollout__run=run, source=LabelSource.HUMAN, decision="approved").count() == 2
    seed()
    assert Run.objects.filter(team__slug="demo").count() == 1
