"""An environment version as a `verifiers` (v1) taskset and environment (the `studio_client[verifiers]`
extra): one task per studio task; the environment plays each as a session of the remote studio (a
recorded rollout) and records the studio verifier's reward on the trace.

    import verifiers.v1 as vf
    from studio_client.verifiers_taskset import StudioTaskset, StudioTasksetConfig
    taskset = StudioTaskset(StudioTasksetConfig(base_url="http://localhost:8000", version="inventory-tools@1"))

The API token is read from STUDIO_TOKEN when an episode runs, so it never rides in task data or traces.
The model answers each turn with a tool call as JSON, {"tool": name, "arguments": {...}}; any other
text is its final answer (the version's `text_answer` tool gets it when environment.toml names one).
"""
import asyncio
import json
import os
from collections.abc import Iterator

import verifiers.v1 as vf

from . import StudioClient
from .tools import function_tools, text_answer_call

REWARD = "studio_verifier"


class StudioData(vf.TaskData):
    base_url: str
    version: str
    task_id: str
    seed: int = 0


class StudioTasksetConfig(vf.TasksetConfig):
    base_url: str = "http://localhost:8000"
    version: str = ""
    """The environment version, "slug@N"."""
    task_ids: list[str] | None = None
    """The tasks to load (default: all of the version's, in file order)."""
    seed: int = 0


class StudioTask(vf.Task[StudioData]):
    pass


def token_client(base_url: str, token: str | None = None) -> StudioClient:
    token = token if token is not None else os.environ.get("STUDIO_TOKEN", "")
    if not token:
        raise RuntimeError("set STUDIO_TOKEN to a team API token of the studio")
    return StudioClient(base_url, token)


class StudioTaskset(vf.Taskset[StudioTask, StudioTasksetConfig]):
    def __init__(self, config: StudioTasksetConfig, *, client: StudioClient | None = None):
        super().__init__(config)
        self.client = client

    def load(self) -> Iterator[StudioTask]:
        config = self.config
        client = self.client or token_client(config.base_url)
        for task_id in config.task_ids or client.task_ids(config.version):
            yield StudioTask(
                StudioData(id=task_id, name=f"{config.version}#{task_id}", prompt=None, base_url=config.base_url,
                           version=config.version, task_id=task_id, seed=config.seed),
                config.task,
            )


def parse_reply(reply: str, tools: dict[str, dict], text_answer: str | None) -> dict | None:
    """The step a reply asks for: a tool call written as JSON, the `text_answer` call of any other
    text, or None (the episode ends with the reply as the answer)."""
    text = reply.strip()
    if text.startswith("```") and text.endswith("```"):
        text = "\n".join(text.splitlines()[1:-1]).strip()
    try:
        action = json.loads(text)
    except ValueError:
        action = None
    if isinstance(action, dict) and action.get("tool") in tools:
        arguments = action.get("arguments") or {}
        return {"tool": action["tool"], "arguments": arguments if isinstance(arguments, dict) else {}}
    target = text_answer_call(text_answer, tools)
    return None if target is None else {"tool": target[0], "arguments": {target[1]: reply.strip()}}


class StudioEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class StudioEnv(vf.Env[StudioEnvConfig]):
    async def run(self, task, agents):
        data = task.data
        client = token_client(data.base_url)
        slug, _, number = data.version.partition("@")
        manifest = (await asyncio.to_thread(client.request, "GET", f"/environments/{slug}/versions/{number}")).get("manifest") or {}
        session = await asyncio.to_thread(client.session, data.version, data.task_id, data.seed)
        tools = {spec["function"]["name"]: spec["function"] for spec in function_tools(session.tools)}
        observation, done = session.observation, False
        try:
            async with agents.player.interaction(task) as interaction:
                payload = {"observation": observation, "tools": list(tools.values())}
                segment = await interaction.turn(json.dumps(payload, ensure_ascii=False))
                while not segment.terminated and not done:
                    action = parse_reply(segment.last_reply or "", tools, manifest.get("text_answer"))
                    if action is None:
                        break
                    observation, _, terminated, truncated, _ = await asyncio.to_thread(session.step, action)
                    done = terminated or truncated
                    if not done:
                        segment = await interaction.turn(json.dumps({"observation": observation}, ensure_ascii=False))
        finally:
            result = await asyncio.to_thread(session.close) or {}
            client.close()
        interaction.trace.record_reward(REWARD, float(result.get("verifier_reward") or 0.0))
