"""A small Python client of the Environment Studio API, for training loops and batch evaluation.

    from studio_client import StudioClient, StudioEnv, StudioVectorEnv

    client = StudioClient("http://localhost:8000", token="es_...")
    env = StudioEnv(client, "frozen-lake@1")              # a gymnasium.Env: spaces from the server
    observation, info = env.reset(seed=0)                 # the seed picks the task, and seeds it
    observation, reward, terminated, truncated, info = env.step(env.action_space.sample())

    envs = StudioVectorEnv(client, "frozen-lake@1", num_envs=8)   # 8 episodes, one request a step
    observations, infos = envs.reset(seed=0)

Every episode is a session on the server, recorded as a rollout of the team's `remote` agent.
Install it from a studio: `pip install <studio URL>/client/python` (docs/protocols.md). Needs httpx,
gymnasium and numpy; never Django: the studio imports this package in place, users install it.
Observations come back as the environment returned them (`from_json`): numpy arrays for `{"__ndarray__": ...}`, floats for `{"__float__": ...}`.
"""
import base64
import json
import time

import httpx

from .spaces import JsonSpace, action_to_json, observation_from_json, space_from_description

__version__ = "0.1.0"

__all__ = ["JsonSpace", "RemoteSession", "StudioClient", "StudioEnv", "StudioError", "StudioVectorEnv",
           "action_to_json", "from_json", "observation_from_json", "space_from_description"]

_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "-0.0": -0.0}


def from_json(value):
    """A value in the API's JSON forms (docs/observations.md) as the environment returned it:
    `{"__float__": "nan"}` -> nan, `{"__ndarray__": {"dtype", "shape", "data" | "base64"}}` -> a numpy
    array (kept as it is without numpy, or when it is only a stored reference with a "url")."""
    if isinstance(value, list):
        return [from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        if "__float__" in value and value["__float__"] in _FLOATS:
            return _FLOATS[value["__float__"]]
        array = value.get("__ndarray__")
        if isinstance(array, dict) and ("data" in array or "base64" in array):
            try:
                import numpy
            except ImportError:
                return value
            dtype = numpy.dtype(array["dtype"])
            if "base64" in array:
                raw = numpy.frombuffer(base64.b64decode(array["base64"]), dtype=dtype.newbyteorder("<"))
                return raw.astype(dtype).reshape(array["shape"])
            return numpy.asarray(array["data"], dtype=dtype).reshape(array["shape"])
    return {key: from_json(item) for key, item in value.items()}

FINISHED_RUN_STATUSES = ("finished", "cancelled")


class StudioError(Exception):
    """The API refused a request: `status` is the HTTP status, `detail` its message, `field` the input at fault."""

    def __init__(self, status: int, detail: str, field: str | None = None):
        super().__init__(f"HTTP {status}: {detail}" + (f" (field {field})" if field else ""))
        self.status, self.detail, self.field = status, detail, field


class StudioClient:
    """The API at `base_url` (e.g. http://localhost:8000) with a team's API token."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0, transport: httpx.BaseTransport | None = None):
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def request(self, method: str, path: str, body=None):
        response = self.http.request(method, path, json=body)
        if response.status_code >= 400:
            try:
                error = response.json()
                raise StudioError(response.status_code, str(error.get("detail", error)), error.get("field"))
            except ValueError:
                raise StudioError(response.status_code, response.text[:500]) from None
        return response.json() if response.content else None

    # sessions

    def session(self, version: str, task_id: str | None, seed: int = 0, *, curriculum: str | None = None,
                agent: str | None = None) -> "RemoteSession":
        """Start a remote session: the environment version runs on the server for this task and seed; with
        no task and a `curriculum` (uniform, learnable, ladder), the server's sampler picks the task.
        `agent` names the agent its episode (and task statistics) count under (`remote` when left out)."""
        return RemoteSession(self, version, None if task_id is None else str(task_id), seed, curriculum=curriculum,
                             agent=agent)

    def spaces(self, version: str, task_id: str | None = None) -> dict:
        """The version's published spaces: {task_ids, action_space, observation_space, tools}."""
        slug, _, number = version.partition("@")
        return self.request("GET", f"/environments/{slug}/versions/{number}/spaces" + (f"?task_id={task_id}" if task_id else ""))

    def step_many(self, steps: list[tuple[str, object]]) -> list[dict]:
        """Step many sessions in one request: (session id, action) pairs; results in the same order."""
        body = {"steps": [{"session_id": session_id, "action": action} for session_id, action in steps]}
        return self.request("POST", "/sessions/step", body)["results"]

    def task_ids(self, version: str) -> list[str]:
        """The task ids of a version ("slug@N"), in file order."""
        slug, _, number = version.partition("@")
        response = self.http.get(f"/environments/{slug}/versions/{number}/files/tasks.jsonl")
        if response.status_code >= 400:
            raise StudioError(response.status_code, response.text[:500])
        return [str(json.loads(line)["id"]) for line in response.text.splitlines() if line.strip()]

    # agents and runs

    def create_agent(self, name: str, *, kind: str = "openai", config: dict | None = None, api_key: str = "", code: str = "") -> dict:
        """An agent of the team; for `openai`, config has base_url and model, and api_key is stored as a secret."""
        return self.request("POST", "/agents", {"name": name, "kind": kind, "config": config or {}, "api_key": api_key, "code": code})

    def run_batch(self, version: str, agent: int | str, *, task_ids="all", seeds="0", repeats: int = 1,
                  limits: dict | None = None, poll_s: float = 1.0, timeout_s: float = 3600.0) -> dict:
        """Evaluate an agent over a version's tasks: create the run, wait for it to finish, and return it
        with its summary (success rate, mean return and verifier reward, by difficulty and task) and `usage` (tokens, cost)."""
        run = self.request("POST", "/runs", {
            "version": version, "agent": agent, "task_ids": task_ids, "seeds": seeds, "repeats": repeats,
            "limits": limits or {},
        })
        deadline = time.monotonic() + timeout_s
        while run["status"] not in FINISHED_RUN_STATUSES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run['id']} did not finish within {timeout_s:g} s (status {run['status']})")
            time.sleep(poll_s)
            run = self.request("GET", f"/runs/{run['id']}")
        run["usage"] = self.request("GET", f"/runs/{run['id']}/usage")
        return run

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class RemoteSession:
    """One episode on the server. `observation`, `tools` and `action_space` are what the start returned."""

    def __init__(self, client: StudioClient, version: str, task_id: str | None, seed: int, *, curriculum: str | None = None,
                 agent: str | None = None):
        self.client, self.version, self.task_id, self.seed, self.curriculum = client, version, task_id, seed, curriculum
        self.agent = agent
        self._open()

    def _open(self) -> None:
        body = {"version": self.version, "seed": self.seed, **({"agent": self.agent} if self.agent is not None else {})}
        body.update({"task_id": self.task_id} if self.task_id is not None else {"curriculum": self.curriculum})
        started = self.client.request("POST", "/sessions", body)
        self.task_id = started.get("task_id", self.task_id)  # the curriculum's pick; a reset keeps it
        self.id, self.rollout_id, self.run_id = started["session_id"], started["rollout_id"], started["run_id"]
        self.observation, self.tools, self.action_space = from_json(started["observation"]), started["tools"], started["action_space"]
        self.reset_info = from_json(started.get("reset_info") or {})
        self.observation_space = started.get("observation_space")  # the description the environment reported, if any
        self.steps, self.closed, self.result = 0, False, None

    def reset(self):
        """(observation, info) of the episode's start; after steps, a fresh session (same task and seed)."""
        if self.steps or self.closed:
            self.close()
            self._open()
        return self.observation, {**self.reset_info, "tools": self.tools, "action_space": self.action_space,
                                  "rollout_id": self.rollout_id, "session_id": self.id}

    def step(self, action):
        """(observation, reward, terminated, truncated, info), as Gymnasium's step."""
        result = self.client.request("POST", f"/sessions/{self.id}/step", {"action": action})
        self.steps += 1
        self.observation = from_json(result["observation"])
        return self.observation, result["reward"], result["terminated"], result["truncated"], from_json(result["info"])

    def close(self) -> dict | None:
        """Verify and finish the rollout; returns its status, verifier reward and reason (once)."""
        if not self.closed:
            self.closed = True
            try:
                self.result = self.client.request("POST", f"/sessions/{self.id}/close")
            except StudioError as exc:
                if exc.status != 404:  # 404: the server already closed it (idle, or the episode failed)
                    raise
        return self.result

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


from .gym import StudioEnv, StudioVectorEnv  # noqa: E402 - they build on the client above
