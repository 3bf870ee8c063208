"""The studio answers like openenv-core's `create_app` over the same environment: one message sequence
(HTTP and websocket: resets, steps, bad actions, step before reset, state, unknown routes, MCP) sent
to the reference server and to the studio, status codes and JSON shapes (keys and types, not
values) compared. Then openenv-core's own typed clients play against the studio unchanged."""
import asyncio
import json
import socket
import threading

import httpx
import pytest
import uvicorn
from openenv.core.env_server import CallToolAction, CallToolObservation, create_app
from openenv.core.mcp_client import MCPToolClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from runs.models import Rollout, RolloutStatus, Step
from runs.protocols.keys import openenv_base_path, openenv_key_get_or_create
from tests.processes import kill_group, start_asgi_server, wait_for
from tests.runs.rollout_factories import package_version

from tests.protocols.parity_envs import (
    CONNECT3_ENV_PY, ECHO_ENV_PY, Connect3Action, Connect3Client, Connect3Environment, Connect3Observation, Connect3State,
    EchoEnvironment,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Values whose inner shape is the environment's or the library's own, not the protocol's: compared by type.
OPAQUE = {"metadata", "meta", "input_schema", "output_schema", "structured_content", "data", "ctx", "input", "properties",
          "paths", "components", "info", "tags", "msg", "message"}
# Where the studio adds what the protocol leaves room for.
STUDIO_ROOM = {"metadata", "servers"}


def shape(value, key=None):
    if key in OPAQUE:
        return "object" if isinstance(value, dict) else shape(value) if not isinstance(value, (dict, list)) else "array"
    if isinstance(value, dict):
        return {name: shape(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0], key)] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def differences(reference, studio, path="$", room=frozenset()) -> list[str]:
    """Where two shapes differ; null matches any type (an optional field), the studio may add STUDIO_ROOM keys
    (and `room` ones at the top)."""
    if reference is None or studio is None or reference == studio:
        return []
    if isinstance(reference, dict) and isinstance(studio, dict):
        found = [f"{path}.{key}: missing" for key in reference if key not in studio]
        found += [f"{path}.{key}: extra" for key in studio if key not in reference and key not in STUDIO_ROOM | room]
        for key in reference.keys() & studio.keys():
            found += differences(reference[key], studio[key], f"{path}.{key}")
        return found
    if isinstance(reference, list) and isinstance(studio, list):
        return differences(reference[0], studio[0], f"{path}[0]") if reference and studio else []
    return [f"{path}: {reference!r} vs {studio!r}"]


# -- the two servers -----------------------------------------------------------------------------------


def serve_in_thread(app) -> tuple[str, uvicorn.Server]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    threading.Thread(target=server.run, daemon=True).start()
    wait_for(lambda: server.started, 15, "the reference server to start")
    return f"http://127.0.0.1:{port}", server


@pytest.fixture(scope="module")
def reference():
    """openenv-core's own servers over the two reference environments."""
    connect3, first = serve_in_thread(create_app(Connect3Environment, Connect3Action, Connect3Observation, max_concurrent_envs=8))
    echo, second = serve_in_thread(create_app(EchoEnvironment, CallToolAction, CallToolObservation, max_concurrent_envs=8))
    yield {"connect3": connect3, "echo": echo}
    first.should_exit = second.should_exit = True


@pytest.fixture
def connect3(team, owner):
    return package_version(team, owner, "connect3", CONNECT3_ENV_PY, entrypoint="env:Connect3")


@pytest.fixture
def echo(team, owner):
    return package_version(team, owner, "echo", ECHO_ENV_PY, entrypoint="env:Echo")


# -- one exchange at a time ---------------------------------------------------------------------------------


def http(base, method, path, *, body=None, raw=None, params=None):
    """(status, content type, JSON shape or None) of one HTTP request, and the JSON itself."""
    if raw is not None:
        response = httpx.request(method, base + path, content=raw, headers={"content-type": "application/json"}, timeout=30)
    else:
        response = httpx.request(method, base + path, json=body, params=params, timeout=30)
    kind = response.headers.get("content-type", "").split(";")[0]
    data = response.json() if kind == "application/json" else None
    return (response.status_code, kind, shape(data)), data


async def websocket_exchanges(base, messages):
    """The shape of each reply (or "closed") to each message over one websocket session."""
    replies = []
    async with connect(base.replace("http", "ws", 1) + "/ws") as ws:
        for message in messages:
            await ws.send(message if isinstance(message, str) else json.dumps(message))
            try:
                reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
            except ConnectionClosed:
                replies.append(("closed", None))
                break
            replies.append((shape(reply), reply))
    return replies


def compare(name, reference, studio, room=frozenset()) -> list[str]:
    if isinstance(reference, tuple) and isinstance(studio, tuple) and reference[:2] != studio[:2]:
        return [f"{name}: status/type {reference[:2]} vs {studio[:2]}"]
    if isinstance(reference, tuple) and isinstance(studio, tuple):
        reference, studio = reference[2], studio[2]
    return [f"{name}: {difference}" for difference in differences(reference, studio, room=room)]


# The reference's HTTP /state goes through FastAPI's `response_model=State`, which drops an
# environment's own state fields (its websocket `state` keeps them, and State allows extra fields):
# the studio serves them on both.
HTTP_ROOM = {"state": frozenset(Connect3State.model_fields)}


CONNECT3_WEBSOCKET = [
    ("step before reset", {"type": "step", "data": {"column": 1}}),
    ("reset", {"type": "reset", "data": {}}),
    ("step", {"type": "step", "data": {"column": 1, "metadata": {"note": "mine"}}}),
    ("bad action", {"type": "step", "data": {"column": "x", "colour": "red"}}),
    ("out of range", {"type": "step", "data": {"column": 9}}),
    ("state", {"type": "state"}),
    ("unknown type", {"type": "bogus"}),
    ("not JSON", "not json"),
    ("step without data", {"type": "step"}),
    ("state with an extra field", {"type": "state", "extra": 1}),
    ("mcp tools/list without tools", {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}}),
    ("mcp bad request", {"type": "mcp", "data": {"bad": 1}}),
    ("close", {"type": "close"}),
]

ECHO_WEBSOCKET = [
    ("reset", {"type": "reset", "data": {}}),
    ("list_tools step", {"type": "step", "data": {"type": "list_tools"}}),
    ("call_tool step", {"type": "step", "data": {"type": "call_tool", "tool_name": "echo", "arguments": {"message": "hi"}}}),
    ("unknown tool step", {"type": "step", "data": {"type": "call_tool", "tool_name": "nope", "arguments": {}}}),
    ("mcp tools/list", {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}}),
    ("mcp tools/call", {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/call", "id": 2,
                                                "params": {"name": "echo", "arguments": {"message": "yo"}}}}),
    ("state", {"type": "state"}),
    ("close", {"type": "close"}),
]


def http_sequence(base, *, studio: bool):
    """The HTTP exchanges of the connect-three sequence on one server: name -> (status, type, shape)."""
    got = {}
    for name, path in (("health", "/health"), ("metadata", "/metadata"), ("schema", "/schema")):
        got[name], _ = http(base, "GET", path)
    got["reset"], reset = http(base, "POST", "/reset", body={"episode_id": "parity-1"})
    # HTTP keeps no session: each names its episode (the reference's own id, or the studio's from the reset).
    episode_id = reset["observation"]["metadata"]["episode_id"] if studio else "parity-1"
    got["reset without a body"], _ = http(base, "POST", "/reset")
    got["reset with a bad seed"], _ = http(base, "POST", "/reset", body={"seed": -1})
    got["step"], _ = http(base, "POST", "/step", body={"action": {"column": 2}, "episode_id": episode_id})
    got["bad action"], _ = http(base, "POST", "/step", body={"action": {"column": "x", "colour": "red"}, "episode_id": episode_id})
    got["out of range"], _ = http(base, "POST", "/step", body={"action": {"column": 9}, "episode_id": episode_id})
    got["missing field"], _ = http(base, "POST", "/step", body={"action": {}, "episode_id": episode_id})
    got["no action"], _ = http(base, "POST", "/step", body={})
    got["bad JSON"], _ = http(base, "POST", "/step", raw=b"{nope")
    got["not an object"], _ = http(base, "POST", "/step", body=[1])
    got["state"], _ = http(base, "GET", "/state", params={"episode_id": episode_id})
    got["unknown route"], _ = http(base, "GET", "/nope")
    got["wrong method"], _ = http(base, "GET", "/step")
    got["openapi"], _ = http(base, "GET", "/openapi.json")
    got["docs"], _ = http(base, "GET", "/docs")
    got["redoc"], _ = http(base, "GET", "/redoc")
    got["mcp without tools"], _ = http(base, "POST", "/mcp", body={"jsonrpc": "2.0", "method": "tools/list", "id": 1})
    got["mcp bad JSON"], _ = http(base, "POST", "/mcp", raw=b"{x")
    return got


def mcp_http_sequence(base):
    def rpc(method, params=None, request_id=1):
        return http(base, "POST", "/mcp", body={"jsonrpc": "2.0", "method": method, "params": params or {}, "id": request_id})

    got = {}
    got["tools/list"], _ = rpc("tools/list")
    got["session create"], created = rpc("openenv/session/create")
    session_id = created["result"]["session_id"]
    got["tools/call in the session"], _ = rpc("tools/call", {"name": "echo", "arguments": {"message": "hi"}, "session_id": session_id})
    got["tools/call of an unknown tool"], _ = rpc("tools/call", {"name": "nope", "arguments": {}, "session_id": session_id})
    got["session close"], _ = rpc("openenv/session/close", {"session_id": session_id})
    got["session close again"], _ = rpc("openenv/session/close", {"session_id": session_id})
    got["unknown method"], _ = rpc("nope")
    return got


def test_the_studio_answers_the_sequence_with_the_reference_servers_statuses_and_shapes(reference, openenv_of, connect3, echo, owner):
    studio_connect3, studio_echo = openenv_of(connect3, owner)["base_url"], openenv_of(echo, owner)["base_url"]
    problems, exchanges = [], 0
    for base_ref, base_studio, sequence in ((reference["connect3"], studio_connect3, CONNECT3_WEBSOCKET),
                                            (reference["echo"], studio_echo, ECHO_WEBSOCKET)):
        messages = [message for _, message in sequence]
        ref_replies, studio_replies = asyncio.run(websocket_exchanges(base_ref, messages)), asyncio.run(websocket_exchanges(base_studio, messages))
        assert len(ref_replies) == len(studio_replies) == len(sequence)
        for (name, _), (ref_shape, _), (studio_shape, _) in zip(sequence, ref_replies, studio_replies):
            exchanges += 1
            problems += compare(f"ws {name}", ref_shape, studio_shape)
    ref_http, studio_http = http_sequence(reference["connect3"], studio=False), http_sequence(studio_connect3, studio=True)
    ref_mcp, studio_mcp = mcp_http_sequence(reference["echo"]), mcp_http_sequence(studio_echo)
    for ref_got, studio_got in ((ref_http, studio_http), (ref_mcp, studio_mcp)):
        for name in ref_got:
            exchanges += 1
            problems += compare(f"http {name}", ref_got[name], studio_got[name], room=HTTP_ROOM.get(name, frozenset()))
    assert exchanges >= 40
    assert not problems, "\n".join(problems)


def test_where_the_studio_refuses_what_the_reference_lets_through_it_says_so_in_the_protocols_shape(reference, openenv_of, connect3, owner):
    """openenv-core's HTTP step is stateless (a fresh instance): a step naming no episode reaches an
    un-reset environment there (500, plain text); the studio refuses it with a 422 naming the field."""
    base = openenv_of(connect3, owner)["base_url"]
    (status, kind, _), _ = http(reference["connect3"], "POST", "/step", body={"action": {"column": 1}})
    assert (status, kind) == (500, "text/plain")
    (status, _, _), body = http(base, "POST", "/step", body={"action": {"column": 1}})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "episode_id"] and body["detail"][0]["type"] == "missing"
    assert not Rollout.objects.filter(run__environment_version=connect3).exists()  # nothing recorded half
    # A bad action's errors are pydantic's, field by field, as the reference gives them.
    reset = httpx.post(f"{base}/reset", json={}).json()
    episode_id = reset["observation"]["metadata"]["episode_id"]
    bad = httpx.post(f"{base}/step", json={"action": {"column": "x", "colour": "red"}, "episode_id": episode_id}).json()
    ref_bad = httpx.post(f"{reference['connect3']}/step", json={"action": {"column": "x", "colour": "red"}}).json()
    assert [(e["type"], e["loc"]) for e in bad["detail"]] == [(e["type"], e["loc"]) for e in ref_bad["detail"]] == [
        ("int_parsing", ["column"]), ("extra_forbidden", ["colour"])]
    assert Rollout.objects.get(pk=reset["observation"]["metadata"]["rollout_id"]).step_count == 0


# -- openenv-core's typed clients, unchanged, against the studio ---------------------------------------------


def test_a_typed_envclient_plays_a_recorded_episode_with_its_own_models(openenv_of, connect3, owner):
    base = openenv_of(connect3, owner)["base_url"]
    with Connect3Client(base_url=base).sync() as env:
        result = env.reset()
        assert isinstance(result.observation, Connect3Observation) and result.reward == 0.0 and result.done is False
        assert result.observation.legal_moves == [0, 1, 2, 3] and result.observation.metadata["step"] == 0
        rollout_id = result.observation.metadata["rollout_id"]
        moves = 0
        while not result.done:
            result = env.step(Connect3Action(column=3))
            moves += 1
            state = env.state()
            assert isinstance(state, Connect3State) and state.step_count == moves and state.moves == moves
            assert state.board == result.observation.board
        assert result.reward == 1.0 and result.observation.metadata["terminated"] is True  # three in column 3 first
    wait_for(lambda: Rollout.objects.get(pk=rollout_id).status != RolloutStatus.RUNNING, 10, "the episode to close")
    assert [s.action for s in Step.objects.filter(rollout_id=rollout_id).order_by("index")] == [{"column": 3}] * moves


def test_mcp_tool_client_calls_tools_over_the_websocket_and_over_http_sessions(openenv_of, echo, owner):
    base = openenv_of(echo, owner)["base_url"]

    async def play(production: bool):
        async with MCPToolClient(base_url=base) as env:
            env.use_production_mode = production
            if not production:
                await env.reset()
            tools = await env.list_tools()
            said = await env.call_tool("echo", message="hello")
            again = await env.call_tool("echo", message="bye")
            return [tool.name for tool in tools], tools[0].input_schema, said, again

    for production in (False, True):
        names, schema, said, again = asyncio.run(play(production))
        assert names == ["echo"] and schema["required"] == ["message"]
        assert said == {"echoed": "hello", "count": 1} and again == {"echoed": "bye", "count": 2}
    rollouts = Rollout.objects.filter(run__environment_version=echo).order_by("pk")
    wait_for(lambda: not rollouts.filter(status=RolloutStatus.RUNNING).exists(), 10, "both episodes to close")
    assert [rollout.step_count for rollout in rollouts] == [2, 2]  # "bye" ended each episode, recorded


def test_production_settings_serve_the_same_routes(tmp_path, settings, episode_host, echo, team, owner):
    """DEBUG off (HTTPS redirects, no debug pages): the protocol routes, /docs and MCP sessions answer as with it on."""
    settings.SECRET_KEY = "parity-test-secret-key-not-for-production-but-long-enough-0123456789"
    proc, studio = start_asgi_server(tmp_path / "asgi.log", env={"DEBUG": "false", "SECRET_KEY": settings.SECRET_KEY,
                                                                 "ALLOWED_HOSTS": "127.0.0.1"})
    try:
        key = openenv_key_get_or_create(team=team, actor=owner, version=echo)
        base = studio + openenv_base_path(version=echo, key=key)
        for path in ("/health", "/schema", "/openapi.json", "/docs", "/metadata"):
            assert httpx.get(base + path).status_code == 200, path
        created = httpx.post(base + "/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1})
        assert created.status_code == 200 and created.json()["result"]["session_id"]

        async def play():
            async with MCPToolClient(base_url=base) as env:
                env.use_production_mode = True
                return await env.call_tool("echo", message="prod")

        assert asyncio.run(play()) == {"echoed": "prod", "count": 1}
    finally:
        kill_group(proc)


def test_reset_rewards_are_floats_and_observations_keep_the_studio_facts_in_metadata(openenv_of, connect3, owner):
    base = openenv_of(connect3, owner)["base_url"]
    reset = httpx.post(f"{base}/reset", json={"seed": 2}).json()
    assert isinstance(reset["reward"], float) and set(reset["observation"]) == {"board", "current_player", "legal_moves", "message", "metadata"}
    facts = reset["observation"]["metadata"]
    assert {"episode_id", "rollout_id", "task_id", "seed", "step", "info", "terminated", "truncated"} <= set(facts) and facts["seed"] == 2
    httpx.post(f"{base}/close", json={"episode_id": facts["episode_id"]})
