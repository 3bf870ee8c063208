"""A version as an Inspect AI task against a running studio, with Inspect's own mock model: every
sample is a recorded studio rollout and the studio's verifier is the scorer."""
import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from studio_client.inspect_task import studio_task
from runs.models import Rollout
from studio import services as studio_services
from tests.processes import asgi_server, episode_host, episode_host_prefix  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(episode_host, asgi_server, owner, team):  # noqa: F811 - the host first: the server reaches it
    _, raw = studio_services.token_create(team=team, actor=owner, name="inspect")
    return raw


def counted(output: ModelOutput) -> ModelOutput:
    """The mock model counts tokens it was not told with tiktoken, whose vocabulary is a download this
    machine cannot make: each scripted output brings its own usage."""
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return output


def run_eval(task, model, tmp_path):
    (log,) = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error.traceback
    return log


def test_each_sample_is_a_studio_rollout_scored_by_the_verifier(asgi_server, token, inventory, tmp_path):  # noqa: F811
    model = get_model("mockllm/model", custom_outputs=[
        counted(ModelOutput.for_tool_call("mockllm/model", "lookup_item", {"name": "blue widget"}, tool_call_id="l1")),
        counted(ModelOutput.for_tool_call("mockllm/model", "submit_answer", {"answer": "42"}, tool_call_id="s1")),
    ])
    log = run_eval(studio_task(base_url=asgi_server, token=token, version=inventory.label, task_ids=["q1"]), model, tmp_path)

    (sample,) = log.samples
    score = sample.scores["studio_verifier"]
    assert score.value == 1.0 and score.explanation == "answer '42' is correct"
    rollout = Rollout.objects.get(pk=score.metadata["rollout_id"])
    assert (rollout.task_id, rollout.status, rollout.step_count, rollout.run.agent.kind) == ("q1", "succeeded", 2, "remote")
    assert [s.action["tool"] for s in rollout.steps.order_by("index")] == ["lookup_item", "submit_answer"]
    assert [m.role for m in sample.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert log.results.scores[0].metrics["mean"].value == 1.0


def test_a_sample_per_task_and_a_text_reply_ends_the_episode_verified(asgi_server, token, inventory, tmp_path):  # noqa: F811
    # The mock model answering in text, as its default does: each episode ends at once and is judged.
    task_count = len(inventory.tasks)
    model = get_model("mockllm/model", custom_outputs=[
        counted(ModelOutput.from_content("mockllm/model", "Default output from mockllm/model")) for _ in range(task_count)
    ])
    log = run_eval(studio_task(base_url=asgi_server, token=token, version=inventory.label), model, tmp_path)

    task_ids = [task["id"] for task in inventory.tasks]
    assert sorted(sample.id for sample in log.samples) == sorted(task_ids)
    assert all(sample.scores["studio_verifier"].value == 0.0 for sample in log.samples)
    rollouts = Rollout.objects.filter(run__environment_version=inventory)
    assert sorted(rollouts.values_list("task_id", flat=True)) == sorted(task_ids)
    assert set(rollouts.values_list("status", flat=True)) == {"failed"}
    assert set(rollouts.values_list("verifier_reason", flat=True)) == {"no answer submitted"}
