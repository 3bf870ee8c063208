"""An environment version as an Inspect AI task (the `studio_client[inspect]` extra): one Sample per
studio task, the model under evaluation plays each sample as a session of the remote studio (a
recorded rollout: live, replayable, reviewable), and the studio's verifier is the scorer.

    from inspect_ai import eval
    from studio_client.inspect_task import studio_task
    eval(studio_task(base_url="http://localhost:8000", token="est_...", version="inventory-tools@1"),
         model="openai/gpt-4o-mini")

The model sees the environment's tools; each tool call is one step. A reply with no tool call is the
model's answer: it becomes the version's `text_answer` call when environment.toml declares one,
otherwise the episode ends there; either way the session is closed and verified.
"""
import asyncio
import json

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageTool, ChatMessageUser, get_model
from inspect_ai.scorer import Score, mean, scorer
from inspect_ai.solver import solver
from inspect_ai.tool import ToolInfo, ToolParams

from . import StudioClient, StudioError
from .tools import function_tools, text_answer_call

SYSTEM_PROMPT = ("You are an agent acting in an environment. Reach the task's goal by calling the tools you are "
                 "offered, and read each result before the next call. Reply with text only to give your final answer.")
STORE_KEY = "studio"


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def tool_infos(tools) -> list[ToolInfo]:
    """The environment's tools as Inspect's ToolInfo."""
    infos = []
    for tool in function_tools(tools):
        function = tool["function"]
        infos.append(ToolInfo(name=function["name"], description=function["description"] or function["name"],
                              parameters=ToolParams.model_validate(function["parameters"])))
    return infos


def studio_task(*, base_url: str, token: str, version: str, task_ids: list[str] | None = None, seed: int = 0,
                max_turns: int = 30, client: StudioClient | None = None) -> Task:
    """The Inspect task of `version` ("slug@N") on the studio at `base_url` (a team API token)."""
    client = client or StudioClient(base_url, token)
    slug, _, number = version.partition("@")
    detail = client.request("GET", f"/environments/{slug}/versions/{number}")
    text_answer = (detail.get("manifest") or {}).get("text_answer")
    ids = task_ids or client.task_ids(version)
    samples = [
        Sample(id=task_id, input=f"Task {task_id} of {version}", metadata={"version": version, "task_id": task_id, "seed": seed})
        for task_id in ids
    ]
    return Task(
        dataset=MemoryDataset(samples, name=version),
        solver=studio_episode(client=client, version=version, seed=seed, max_turns=max_turns, text_answer=text_answer),
        scorer=studio_verifier(),
        name=f"studio/{version}",
    )


@solver
def studio_episode(*, client: StudioClient, version: str, seed: int, max_turns: int, text_answer: str | None = None):
    async def solve(state, generate):
        task_id = str(state.metadata["task_id"])
        session = await asyncio.to_thread(client.session, version, task_id, seed)
        result = None
        try:
            tools = {spec["function"]["name"]: spec["function"] for spec in function_tools(session.tools)}
            infos = tool_infos(session.tools)
            state.messages = [ChatMessageSystem(content=SYSTEM_PROMPT), ChatMessageUser(content=_text(session.observation))]
            model = get_model()
            done = False
            for _ in range(max_turns):
                output = await model.generate(state.messages, tools=infos)
                state.output = output
                message = output.message
                state.messages.append(message)
                if not message.tool_calls:
                    target = text_answer_call(text_answer, tools)
                    if target is not None:
                        action = {"tool": target[0], "arguments": {target[1]: message.text}}
                        await asyncio.to_thread(session.step, action)
                    break
                for call in message.tool_calls:
                    try:
                        observation, _, terminated, truncated, _ = await asyncio.to_thread(
                            session.step, {"tool": call.function, "arguments": call.arguments})
                    except StudioError as exc:
                        if exc.status != 400:
                            raise
                        # A refused action (e.g. failing the schema): the model reads why, as the studio's agents do.
                        observation, terminated, truncated = {"error": exc.detail}, False, False
                    state.messages.append(ChatMessageTool(content=_text(observation), tool_call_id=call.id, function=call.function))
                    if terminated or truncated:
                        done = True
                        break
                if done:
                    break
        finally:
            result = await asyncio.to_thread(session.close)
        state.store.set(STORE_KEY, {"rollout_id": session.rollout_id, "run_id": session.run_id, **(result or {})})
        return state

    return solve


@scorer(metrics=[mean()])
def studio_verifier():
    """The studio verifier's reward for the sample's rollout, with its reason."""

    async def score(state, target):
        result = state.store.get(STORE_KEY) or {}
        reward = result.get("verifier_reward")
        return Score(
            value=float(reward) if reward is not None else 0.0,
            answer=state.output.completion if state.output else None,
            explanation=result.get("verifier_reason") or result.get("error") or "",
            metadata={"rollout_id": result.get("rollout_id"), "status": result.get("status")},
        )

    return score
