"""An `openai` agent's API key: stored apart from the config, never shown again, never in a sandbox."""
import json

import pytest

from runs.models import Agent, AgentSecret
from runs.openai_agent import api_key_of
from tests.agents.conftest import SECRET, reply, tool_call
from tests.agents.test_openai_agent import play
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_key_is_taken_out_of_the_config_and_never_returned(owner_api, model_server):
    response = owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {
        "base_url": model_server.base_url + "/", "model": "x", "api_key": SECRET}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert SECRET not in response.content.decode() and body["api_key_set"] is True
    assert body["config"]["base_url"] == model_server.base_url and body["config"]["max_turns"] == 30
    agent = Agent.objects.get(pk=body["id"])
    assert "api_key" not in agent.config and api_key_of(agent) == SECRET
    assert SECRET not in AgentSecret.objects.get(agent=agent).api_key  # encrypted at rest
    assert SECRET not in repr(agent.secret) and SECRET not in str(agent.secret)
    for path in ("/agents", f"/agents/{agent.pk}"):
        assert SECRET not in owner_api.get(path).content.decode()


def test_model_agent_config_is_checked(owner_api):
    bad = owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "ftp://x", "model": "m"}})
    assert bad.status_code == 400 and bad.json()["field"] == "config.base_url"
    bad = owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "http://x/v1"}})
    assert bad.json()["field"] == "config.model"
    bad = owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "http://x/v1", "model": "m", "temperature": 9}})
    assert bad.json()["field"] == "config.temperature"
    bad = owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "http://x/v1", "model": "m", "colour": 1}})
    assert bad.status_code == 400 and "colour" in bad.json()["detail"]


def test_the_key_never_reaches_the_sandbox(team, owner, model_agent, model_server):
    version = package_version(team, owner, "peek", """
        import os

        class Env:
            tools = [{"name": "peek", "description": "what the sandbox can see", "parameters": {"type": "object", "properties": {}}}]

            def reset(self, task, seed):
                return {"start": True}

            def step(self, action):
                seen = {"environ": dict(os.environ), "files": sorted(os.listdir(".")), "action": action}
                return seen, 0.0, True, False, {}
    """)
    model_server.add(reply(tool_call("peek", {}, "p")))
    rollout, steps = play(team, owner, version, model_agent(), task_id="t1")
    assert steps[0].observation["environ"] and "env.py" in steps[0].observation["files"]
    assert SECRET not in json.dumps([s.observation for s in steps] + [s.action for s in steps] + [rollout.reproduction])
