"""The version page's task map in a real browser: bands per task, the held-out task marked, each agent's
train-eval gap, and the agent picker swapping the map in place (htmx)."""
import pytest

from runs import services as run_services
from runs.curriculum.models import TaskStat
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.curriculum.test_task_stats_and_samplers import ENV_PY, TASKS
from tests.runs.rollout_factories import package_version, play_run, random_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_task_map_shows_bands_the_held_out_task_and_the_gap_per_agent(page, live_server, team, owner):
    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    play_run(run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                     task_ids="all", seeds=list(range(12))))
    for task_id, rollouts, successes in (("easy", 40, 40), ("coin", 30, 15), ("never", 40, 0), ("held-out", 10, 3)):
        TaskStat.objects.create(team=team, environment_version=version, task_id=task_id, agent_name="policy-a",
                                rollouts=rollouts, successes=successes)
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/environments/bands/versions/1/")
    task_map = page.locator("section#task-map")
    task_map.locator("table.split-gaps").wait_for()  # policy-a first: it has the most rollouts
    bands = {row.get_attribute("data-task"): row.get_attribute("data-band") for row in task_map.locator("tr[data-task]").all()}
    assert bands == {"easy": "too_easy", "coin": "learnable", "never": "too_hard", "held-out": "learnable"}
    assert task_map.locator('tr[data-task="held-out"] .badge').first.inner_text() == "eval"
    gaps = {row.get_attribute("data-agent"): row.get_attribute("data-gap") for row in task_map.locator("table.split-gaps tbody tr").all()}
    assert set(gaps) == {"random", "policy-a"} and float(gaps["policy-a"]) == round((1.0 + 0.5 + 0.0) / 3 - 0.3, 4)
    page.select_option("section#task-map select[name=agent]", "random")
    page.locator('section#task-map tr[data-task="easy"][data-band="learnable"]').wait_for()  # 12 of 12: not yet confident
    page.locator("section#task-map").screenshot(path="/tmp/task_map.png")
