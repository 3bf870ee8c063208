"""A studio environment version as a real `gymnasium.Env`, and N of its episodes as a
`gymnasium.vector.VectorEnv` stepped in one request per step (POST /api/v1/sessions/step).

Spaces are the ones the server publishes for the version; where it knows no observation space yet
(an `env:Class` version whose `observation_space` no episode has reported), the first reset takes
the one its episode reports. Observations and infos come as the environment gave them: arrays keep
their dtype, dict and tuple observations are dicts and tuples of arrays. A seed picks the task (the same seed,
the same task: `task_ids[seed % len(task_ids)]`, the training tasks by default, never a held-out one) and
seeds the episode; `options={"task_id": ...}` picks a task outright. Every episode is a recorded rollout of
the team's `remote` agent, or of the one named with `agent=`.
"""
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from gymnasium.vector.vector_env import AutoresetMode

from . import RemoteSession, StudioClient, StudioError, from_json
from .spaces import JsonSpace, action_to_json, observation_from_json, space_from_description

SEED_BOUND = 2**31


def training_ids(published: dict) -> list[str]:
    """The tasks a reset picks from by seed: every one but the held-out (split = eval) ones, unless all are."""
    held_out = set(published.get("eval_task_ids") or [])
    return [task_id for task_id in published["task_ids"] if task_id not in held_out] or list(published["task_ids"])


def task_for_seed(task_ids: list[str], seed: int) -> str:
    return task_ids[seed % len(task_ids)]


class StudioEnv(gymnasium.Env):
    """One episode at a time of `version` ("slug@N"); each reset() closes (verifies) the last one."""

    metadata = {"render_modes": []}

    def __init__(self, client: StudioClient, version: str, *, task_ids: list[str] | None = None, render_mode=None,
                 curriculum: str | None = None, agent: str | None = None):
        published = client.spaces(version)
        self.curriculum = curriculum  # uniform, learnable or ladder: the server picks each reset's task
        self.agent = agent  # the agent its episodes and task statistics count under (`remote` when None)
        self.client, self.version, self.render_mode = client, version, render_mode
        self.task_ids = [str(task_id) for task_id in task_ids] if task_ids else training_ids(published)
        self.tools: list[dict] = published.get("tools") or []
        self.action_space = space_from_description(published.get("action_space"))
        self.observation_space = space_from_description(published.get("observation_space"))
        self.session: RemoteSession | None = None
        self.last_result: dict | None = None  # the previous episode's close(): status, verifier reward

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._end_episode()
        episode_seed = seed if seed is not None else int(self.np_random.integers(SEED_BOUND))
        task_id = (options or {}).get("task_id")
        if task_id is None and self.curriculum:
            self.session = self.client.session(self.version, None, episode_seed, curriculum=self.curriculum, agent=self.agent)
            task_id = self.session.task_id
        else:
            task_id = str(task_id) if task_id is not None else task_for_seed(self.task_ids, episode_seed)
            self.session = self.client.session(self.version, task_id, episode_seed, agent=self.agent)
        observation, info = self.session.reset()
        if isinstance(self.observation_space, JsonSpace) and self.session.observation_space:
            self.observation_space = space_from_description(self.session.observation_space)
        if isinstance(self.action_space, JsonSpace) and isinstance(self.session.action_space, dict):
            self.action_space = space_from_description(self.session.action_space)
        return observation_from_json(self.observation_space, observation), {**info, "task_id": task_id, "seed": episode_seed}

    def step(self, action):
        if self.session is None:
            raise RuntimeError("call reset() before step()")
        observation, reward, terminated, truncated, info = self.session.step(action_to_json(action))
        # The environment's own info: the same seed and actions give the same info (check_env asks).
        return observation_from_json(self.observation_space, observation), float(reward), bool(terminated), bool(truncated), info or {}

    def render(self):
        return None

    def close(self) -> None:
        self._end_episode()
        super().close()

    def _end_episode(self) -> None:
        if self.session is not None and not self.session.closed:
            self.last_result = self.session.close()
        self.session = None


class StudioVectorEnv(VectorEnv):
    """`num_envs` episodes of `version`, stepped together: one request a step for all of them.
    Autoreset as Gymnasium 1.x's default (next step): the step after an episode ends resets that
    sub-environment (its action ignored; reward 0, not terminated) while the others step."""

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, client: StudioClient, version: str, num_envs: int, *, task_ids: list[str] | None = None,
                 max_workers: int = 8, curriculum: str | None = None, agent: str | None = None):
        self.curriculum = curriculum  # uniform, learnable or ladder: the server picks each episode's task
        self.agent = agent  # the agent its episodes and task statistics count under (`remote` when None)
        if num_envs < 1:
            raise ValueError("num_envs must be at least 1")
        published = client.spaces(version)
        self.client, self.version, self.num_envs = client, version, num_envs
        self.task_ids = [str(task_id) for task_id in task_ids] if task_ids else training_ids(published)
        self.single_action_space = space_from_description(published.get("action_space"))
        self.single_observation_space = space_from_description(published.get("observation_space"))
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.sessions: list[RemoteSession | None] = [None] * num_envs
        self.seeds = [0] * num_envs
        self.last_results: list[dict | None] = [None] * num_envs
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, num_envs)), thread_name_prefix="studio-vector")

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        super().reset(seed=seed if isinstance(seed, int) else None)
        if seed is None:
            seeds = [int(self.np_random.integers(SEED_BOUND)) for _ in range(self.num_envs)]
        elif isinstance(seed, int):
            seeds = [seed + index for index in range(self.num_envs)]
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"{len(seed)} seeds for {self.num_envs} environments")
            seeds = [int(s) if s is not None else int(self.np_random.integers(SEED_BOUND)) for s in seed]
        task_id = (options or {}).get("task_id")
        opened = list(self._pool.map(lambda index: self._open(index, seeds[index], task_id), range(self.num_envs)))
        self._learn_spaces(self.sessions[0])
        self._autoreset[:] = False
        infos: dict = {}
        for index, (_, info) in enumerate(opened):
            infos = self._add_info(infos, info, index)
        return self._batch([self._observation(observation) for observation, _ in opened]), infos

    def step(self, actions):
        if any(session is None for session in self.sessions):
            raise RuntimeError("call reset() before step()")
        actions = list(iterate(self.action_space, actions))
        stepping = [index for index in range(self.num_envs) if not self._autoreset[index]]
        results = self.client.step_many([(self.sessions[index].id, action_to_json(actions[index])) for index in stepping]) if stepping else []
        observations: list = [None] * self.num_envs
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict = {}
        for index, result in zip(stepping, results):
            if not result.get("ok"):
                raise StudioError(int(result.get("status") or 500), f"environment {index}: {result.get('error')}")
            self.sessions[index].steps += 1
            observations[index] = self._observation(from_json(result["observation"]))
            rewards[index], terminations[index], truncations[index] = result["reward"], result["terminated"], result["truncated"]
            infos = self._add_info(infos, {**from_json(result.get("info") or {}), "rollout_id": self.sessions[index].rollout_id}, index)
        # Next-step autoreset (Gymnasium's default): an episode that ended last step starts anew now.
        resetting = [index for index in range(self.num_envs) if self._autoreset[index]]
        for index, (observation, info) in zip(resetting, self._pool.map(self._autoreset_one, resetting)):
            observations[index] = self._observation(observation)
            infos = self._add_info(infos, info, index)
        self._autoreset = np.logical_or(terminations, truncations)
        return self._batch(observations), rewards, terminations, truncations, infos

    def close_extras(self, **kwargs) -> None:
        list(self._pool.map(self._close_one, range(self.num_envs)))
        self._pool.shutdown(wait=True)

    def _autoreset_one(self, index: int):
        return self._open(index, int(self.np_random.integers(SEED_BOUND)), None)

    def _open(self, index: int, seed: int, task_id) -> tuple:
        self._close_one(index)
        if task_id is None and self.curriculum:
            session = self.client.session(self.version, None, seed, curriculum=self.curriculum, agent=self.agent)
            task = session.task_id
        else:
            task = str(task_id) if task_id is not None else task_for_seed(self.task_ids, seed)
            session = self.client.session(self.version, task, seed, agent=self.agent)
        self.sessions[index], self.seeds[index] = session, seed
        observation, info = session.reset()
        return observation, {**info, "task_id": task, "seed": seed}

    def _learn_spaces(self, session: RemoteSession) -> None:
        """Spaces the server did not publish yet, from what the first episode reported."""
        if isinstance(self.single_observation_space, JsonSpace) and session.observation_space:
            self.single_observation_space = space_from_description(session.observation_space)
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        if isinstance(self.single_action_space, JsonSpace) and isinstance(session.action_space, dict):
            self.single_action_space = space_from_description(session.action_space)
            self.action_space = batch_space(self.single_action_space, self.num_envs)

    def _observation(self, value):
        return observation_from_json(self.single_observation_space, value)

    def _close_one(self, index: int) -> None:
        session = self.sessions[index]
        if session is not None and not session.closed:
            self.last_results[index] = session.close()

    def _batch(self, observations: list):
        return concatenate(self.single_observation_space, observations,
                           create_empty_array(self.single_observation_space, self.num_envs))
