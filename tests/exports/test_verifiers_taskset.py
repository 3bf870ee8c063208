"""A version as a `verifiers` taskset, with the real package, as far as its API goes without a model:
tasks load from a running studio, views select them, replies parse into steps."""
import pytest

from studio_client.verifiers_taskset import StudioData, StudioTaskset, StudioTasksetConfig, parse_reply
from studio import services as studio_services
from tests.processes import asgi_server, episode_host, episode_host_prefix  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {"lookup_item": {"name": "lookup_item"}, "submit_answer": {"name": "submit_answer",
         "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}


def test_the_taskset_loads_one_task_per_studio_task(asgi_server, inventory, owner, team, monkeypatch):  # noqa: F811
    _, raw = studio_services.token_create(team=team, actor=owner, name="verifiers")
    monkeypatch.setenv("STUDIO_TOKEN", raw)
    taskset = StudioTaskset(StudioTasksetConfig(base_url=asgi_server, version=inventory.label, seed=3))

    tasks = list(taskset)
    assert [task.data.task_id for task in tasks] == [task["id"] for task in inventory.tasks]
    assert all(isinstance(task.data, StudioData) and task.data.seed == 3 for task in tasks)
    assert [task.data.idx for task in tasks] == list(range(len(tasks)))
    assert raw not in tasks[0].data.model_dump_json()  # the token never rides in task data (or traces)
    (picked,) = list(taskset.include(ids=["q2"]))
    assert picked.data.name == f"{inventory.label}#q2" and picked.key == tasks[1].key
    assert len(list(taskset.shuffle(seed=1).take(2))) == 2


def test_replies_parse_into_tool_calls_or_the_text_answer():
    assert parse_reply('{"tool": "lookup_item", "arguments": {"name": "red gadget"}}', TOOLS, None) == {
        "tool": "lookup_item", "arguments": {"name": "red gadget"}}
    assert parse_reply('```json\n{"tool": "submit_answer", "arguments": {"answer": "B3"}}\n```', TOOLS, None)["tool"] == "submit_answer"
    assert parse_reply("It is in aisle B3.", TOOLS, "submit_answer") == {
        "tool": "submit_answer", "arguments": {"answer": "It is in aisle B3."}}
    assert parse_reply("It is in aisle B3.", TOOLS, None) is None
