"""Runs leave as ATIF trajectories (Harbor's Agent Trajectory Interchange Format), and Harbor's own
validator and models (harbor 0.25.0, installed by `make setup-test`) accept every one of them."""
import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from harbor.models.trajectories import Trajectory
from harbor.utils.trajectory_validator import TrajectoryValidator

from runs import services
from tests.agents.conftest import reply, tool_call
from tests.conftest import login
from tests.runs.rollout_factories import play_run

pytestmark = pytest.mark.django_db(transaction=True)


def harbor_valid(document: dict) -> Trajectory:
    validator = TrajectoryValidator()
    assert validator.validate(document), validator.get_errors()
    return Trajectory(**document)


def atif_lines(api, run) -> list[dict]:
    response = api.get(f"/runs/{run.pk}/export", {"format": "atif", "decision": "all"})
    assert response.status_code == 200, response.content
    assert response["Content-Disposition"].endswith('-all-atif.jsonl"')
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


@pytest.fixture
def model_run(team, owner, inventory, model_agent, model_server):
    model_server.add(
        reply(tool_call("lookup_item", {"name": "blue widget"}, "a"), tool_call("list_items", {"category": "tools"}, "b")),
        reply(tool_call("submit_answer", {"answer": "42"}, "c")),
    )
    run = services.run_create(team=team, actor=owner, version=inventory, agent=model_agent(), task_ids=["q1"], seeds=[0])
    (rollout,) = play_run(run)
    return run, rollout


def test_a_model_agents_run_is_an_atif_trajectory_harbor_validates(owner_api, model_run):
    run, rollout = model_run
    (document,) = atif_lines(owner_api, run)
    trajectory = harbor_valid(document)
    assert trajectory.schema_version == "ATIF-v1.8" and trajectory.trajectory_id == f"studio-rollout-{rollout.pk}"
    assert [step.source for step in trajectory.steps][:3] == ["system", "user", "agent"]
    first_turn = trajectory.steps[2]
    assert [(c.tool_call_id, c.function_name, c.arguments) for c in first_turn.tool_calls] == [
        ("a", "lookup_item", {"name": "blue widget"}), ("b", "list_items", {"category": "tools"})]
    # Both results the model read next answer their calls, each with its studio step and reward.
    results = first_turn.observation.results
    assert [r.source_call_id for r in results] == ["a", "b"]
    assert [r.extra["studio_step"] for r in results] == [0, 1]
    assert trajectory.agent.name == "model" and trajectory.agent.extra == {"kind": "openai"}
    assert {tool["function"]["name"] for tool in trajectory.agent.tool_definitions} >= {"lookup_item", "submit_answer"}
    rollout.refresh_from_db()
    assert trajectory.final_metrics.extra["reward"] == rollout.verifier_reward == 1.0
    assert trajectory.final_metrics.total_steps == rollout.step_count
    assert trajectory.extra["studio"]["rollout_id"] == rollout.pk and trajectory.extra["studio"]["task_id"] == "q1"


def test_rebuilt_transcripts_of_integer_actions_and_tool_calls_validate_too(owner_api, make_run):
    for run in (make_run([1.0, 0.0], steps=2), make_run([0.5], steps=3, tool_calls=True, agent_name="caller")):
        documents = atif_lines(owner_api, run)
        assert len(documents) == run.rollouts.count()
        for document in documents:
            trajectory = harbor_valid(document)
            assert trajectory.session_id == f"studio-run-{run.pk}"
    calls = [step for step in trajectory.steps if step.tool_calls]
    assert [c.tool_calls[0].function_name for c in calls] == ["lookup_item"] * 3
    assert [c.observation.results[0].extra["reward"] for c in calls] == [0.5] * 3


def test_harbors_validator_refuses_what_atif_forbids(owner_api, make_run):
    """The check above can fail: a studio key outside `extra`, or steps out of order, are refused."""
    (document,) = atif_lines(owner_api, make_run([1.0], steps=1))
    stray = {**document, "rollout_id": 1}
    shuffled = {**document, "steps": list(reversed(document["steps"]))}
    for broken in (stray, shuffled):
        validator = TrajectoryValidator()
        assert not validator.validate(broken)


def test_the_command_and_the_page_export_atif(owner, make_run, tmp_path):
    run = make_run([1.0, 0.0], steps=2)
    out = io.StringIO()
    call_command("export_trajectories", "--run", str(run.pk), "--format", "atif", stdout=out)
    assert [harbor_valid(json.loads(line)).trajectory_id for line in out.getvalue().splitlines()] == [
        f"studio-rollout-{r.pk}" for r in run.rollouts.order_by("id")]

    page = login(owner).get(reverse("runs:run", kwargs={"team": run.team.slug, "run_id": run.pk}))
    assert b'<option value="atif">ATIF trajectories (Harbor)</option>' in page.content
    url = reverse("review:export_run", kwargs={"team": run.team.slug, "run_id": run.pk})
    response = login(owner).get(url, {"decision": "all", "format": "atif"})
    assert response.status_code == 200 and response["X-Export-Count"] == "2"
    for line in b"".join(response.streaming_content).decode().splitlines():
        harbor_valid(json.loads(line))
    refused = login(owner).get(url, {"decision": "all", "format": "atif", "file": "parquet"})
    assert refused.status_code == 400 and b"ATIF trajectories are JSON documents" in refused.content


def test_atif_is_a_json_lines_file_and_another_teams_run_is_not_found(owner_api, outsider_api, make_run):
    run = make_run([1.0], steps=1)
    response = owner_api.get(f"/runs/{run.pk}/export", {"format": "atif", "file": "parquet"})
    assert response.status_code == 400 and response.json()["field"] == "file"
    assert outsider_api.get(f"/runs/{run.pk}/export", {"format": "atif"}).status_code == 404
