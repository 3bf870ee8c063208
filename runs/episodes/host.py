"""An episode host: a process that holds interactive episodes (human play, remote sessions, protocol
endpoints) and answers requests for them from any web process: starts through Redis (routing.py),
the requests of its episodes over direct connections (direct.py), or through Redis from callers that
cannot reach its address.

Starts run on a pool of their own, with at most START_CONCURRENCY_PER_TEAM at once per team, so a
team's slow `reset()` never delays another team's starts, and never any team's steps. Steps of one
episode are served one at a time (the episode's lock), steps of different episodes in parallel.
A reaper flushes buffered steps, keeps heartbeats and routes fresh, closes idle episodes, and ends
interactive rollouts whose host died (their heartbeat went stale).
"""
import collections
import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import redis
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from ..models import INFRA_ERROR, AgentKind, Rollout, RolloutStatus
from ..sandbox.pool import SandboxPool
from . import memory, plane, routing
from .service import (
    Episode,
    EpisodeFault,
    EpisodeOver,
    episode_fail,
    episode_finish,
    episode_flush,
    episode_start,
    episode_step,
    rollout_end,
)
from .setup import episode_setup
from .status import stale_after_s
from .journal import JournalBatch, journal_append, journal_drop, journal_steps, journal_trim
from .writer import FLUSH_EVERY_STEPS, LostOwnership, flush_together, steps_recover

logger = logging.getLogger(__name__)

INTERACTIVE_AGENT_KINDS = (AgentKind.REMOTE, AgentKind.HUMAN)
START_CONCURRENCY_PER_TEAM = 4
REAP_EVERY_S = 0.2
BEAT_EVERY_S = 1.0
SWEEP_EVERY_S = 5.0
TAKE_AT_ONCE = 64


def idle_timeout_s(driver: str) -> float:
    """An episode nobody stepped for this long is closed (its rollout ends timed_out)."""
    return float(settings.PLAY_IDLE_TIMEOUT_S if driver == "play" else settings.SESSION_IDLE_TIMEOUT_S)


def step_json(step: dict, *, done: bool) -> dict:
    """A step as the host answers it (the API's step shape, plus the screenshot URL and `done`)."""
    return {
        "index": step["index"], "observation": step["observation"], "reward": step["reward"],
        "terminated": step["terminated"], "truncated": step["truncated"], "info": step["info"],
        "artifact_url": step.get("artifact_url"), "done": done,
    }


class HeldEpisode:
    def __init__(self, *, episode_id: str, team_id: int, driver: str, episode: Episode, memory_mb: int = 0):
        self.id, self.team_id, self.driver, self.episode = episode_id, team_id, driver, episode
        self.memory_mb = memory_mb  # what its version declares (memory.declared_memory_mb)
        self.last_used = time.monotonic()


class EpisodeHost:
    def __init__(self, *, host_id: str | None = None, threads: int = 64, start_threads: int = 16, pool_size: int = 4):
        self.id = host_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.redis = routing.client()
        self.held: dict[str, HeldEpisode] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.step_pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="episode-step")
        self.batch_pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="episode-batch")
        self.start_pool = ThreadPoolExecutor(max_workers=start_threads, thread_name_prefix="episode-start")
        # Runner processes of python environments started ahead of time (interpreter up, waiting to
        # load), so opening an episode skips Python's start-up. Sandboxes die with the thread that
        # forked them (PR_SET_PDEATHSIG): the start pool's threads live as long as the host.
        self.sandbox_pool = SandboxPool(size=pool_size) if pool_size and settings.SANDBOX_BACKEND == "process" else None
        self.sandbox_pool_lock = threading.Lock()
        self.starting_mb = 0  # declared memory of the episodes being started
        self.team_starts: dict[int, int] = collections.Counter()
        self.team_pending: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self.take_many = True
        self.direct = None  # its DirectServer once serving (direct.py), when EPISODE_HOST_DIRECT

    # -- the loop -------------------------------------------------------------------------------

    def serve(self) -> None:
        self.listen()
        self._announce()
        threads = [threading.Thread(target=self._reap_forever, name="episode-reaper", daemon=True),
                   threading.Thread(target=self._announce_forever, name="episode-presence", daemon=True)]
        for thread in threads:
            thread.start()
        logger.info("episode host %s serving", self.id)
        while not self.stopping.is_set():
            try:
                found = self._take()
            except redis.RedisError:
                logger.warning("episode host %s: Redis unreachable; retrying", self.id, exc_info=True)
                self.stopping.wait(0.5)
                continue
            for raw in found:
                try:
                    message = json.loads(raw)
                except ValueError:
                    logger.warning("episode host %s: dropped a request that is not JSON", self.id)
                    continue
                self._dispatch(message)
        self.shutdown()

    def listen(self) -> None:
        """Open the direct port (before the first announce, which names it)."""
        if self.direct is not None or not plane.direct_enabled():
            return
        from .direct import DirectServer

        self.direct = DirectServer(self, bind=settings.EPISODE_HOST_BIND, port=int(settings.EPISODE_HOST_PORT),
                                   advertise=settings.EPISODE_HOST_ADVERTISE)
        self.direct.start()
        logger.info("episode host %s reachable directly at %s", self.id, self.direct.address)

    def dispatch_direct(self, message: dict, respond) -> None:
        """A request that came over a direct connection: answered on it (starts come through Redis)."""
        if message.get("op") == "start":
            respond({"id": message.get("id"), "ok": False, "status": 400, "error": "starts go through Redis"})
            return
        self.step_pool.submit(self._answer, message, respond)

    def _take(self) -> list[bytes]:
        """The next requests: under load, up to TAKE_AT_ONCE of this host's own in one round trip;
        otherwise a blocking wait on its list and the shared start list (starts one at a time, so
        idle hosts share them)."""
        own = routing.host_queue(self.id)
        if self.take_many:
            try:
                waiting = self.redis.lpop(own, TAKE_AT_ONCE)
            except redis.ResponseError:  # Redis before 6.2: no count
                self.take_many = False
                waiting = None
            if waiting:
                return waiting
        found = self.redis.blpop([own, routing.start_queue()], timeout=1)
        return [found[1]] if found is not None else []

    def _dispatch(self, message: dict) -> None:
        op = message.get("op")
        if op == "start":
            team_id = int(message.get("team") or 0)
            with self.lock:
                if self.team_starts[team_id] >= START_CONCURRENCY_PER_TEAM:
                    self.team_pending[team_id].append(message)
                    return
                self.team_starts[team_id] += 1
            self.start_pool.submit(self._start_then_next, team_id, message)
        else:
            self.step_pool.submit(self._answer, message)

    def _start_then_next(self, team_id: int, message: dict) -> None:
        while message is not None:
            self._answer(message)
            with self.lock:
                pending = self.team_pending.get(team_id)
                message = pending.popleft() if pending else None
                if message is None:
                    self.team_starts[team_id] -= 1

    def _answer(self, message: dict, respond=None) -> None:
        request_id = message.get("reply")
        # A step's journal entry and its reply travel in one round trip, the entry first (direct:
        # the entry is stored, then the reply goes on the connection).
        pipe = JournalBatch(self.redis) if respond is not None else self.redis.pipeline(transaction=False)
        try:
            result = self._handle(message, pipe)
            reply = {"ok": True, "result": result}
        except routing.HostError as exc:
            reply = {"ok": False, "error": str(exc), "status": exc.status, "field": exc.field}
        except Exception as exc:  # noqa: BLE001 - a bug must answer the caller, not leave it waiting
            logger.exception("episode host %s: %s failed", self.id, message.get("op"))
            reply = {"ok": False, "error": f"internal error in the episode host: {exc!r}", "status": 500}
        finally:
            # Steps touch no database; starts, closes and faults do. Hundreds of threads must not each
            # keep a PostgreSQL connection open: hand it back once the operation is done.
            if connection.connection is not None:
                connection.close()
        if respond is not None:
            # Direct: the step's journal entry first (as on the Redis path), then the reply.
            if len(pipe):
                try:
                    pipe.execute()
                except redis.RedisError:
                    logger.warning("episode host %s: could not journal a step (it stays buffered for the next write)",
                                   self.id, exc_info=True)
            respond({**reply, "id": message.get("id")})
            return
        if request_id:
            try:
                routing.send_reply(self.redis, request_id, reply, pipe=pipe)
            except redis.RedisError:
                # The reply (and a step's journal entry, which travels with it) is lost; the step
                # itself stays buffered for the next write.
                logger.warning("episode host %s: could not reply to %s (nor journal its step)", self.id, request_id,
                               exc_info=True)

    # -- operations -----------------------------------------------------------------------------

    def _handle(self, message: dict, pipe) -> dict:
        op = message.get("op")
        if op == "start":
            return self.start(message)
        if op == "steps":
            # Each episode's sandbox is its own process: step them side by side, answer in order.
            return {"results": list(self.batch_pool.map(self._step_one, message.get("items") or []))}
        held = self._held(message)
        if op == "step":
            return self.step(held, message.get("action"), pipe)
        if op == "observe":
            return self.observe(held)
        if op == "close":
            return self.close(held)
        raise routing.HostError(f"unknown operation {op!r}")

    def _held(self, message: dict) -> HeldEpisode:
        held = self.held.get(str(message.get("episode")))
        if held is None or held.team_id != message.get("team"):
            raise routing.HostError("No open episode with this id (closed, timed out, or never opened).", 404)
        return held

    def memory_used_mb(self) -> int:
        """What this host's open episodes, and those it is starting, declare (call with the lock)."""
        return sum(held.memory_mb for held in self.held.values()) + self.starting_mb

    def _reserve_memory(self, memory_mb: int) -> None:
        budget = memory.host_budget_mb()
        with self.lock:
            used = self.memory_used_mb()
            if used + memory_mb > budget:
                raise routing.HostError(
                    f"The episode host {self.id} holds {len(self.held)} open episodes declaring {used:,} MB of memory;"
                    f" this one asks {memory_mb:,} MB more, over the host's budget of {budget:,} MB"
                    f" (EPISODE_HOST_MEMORY_MB). Retry once some episodes end.", 429,
                )
            self.starting_mb += memory_mb

    def start(self, message: dict) -> dict:
        rollout = Rollout.objects.select_related("run__environment_version__environment", "run__agent").filter(
            pk=message["rollout"]
        ).first()
        memory_mb = memory.declared_memory_mb(rollout.run.environment_version) if rollout is not None else 0
        self._reserve_memory(memory_mb)
        try:
            return self._start(message, memory_mb)
        finally:
            with self.lock:
                self.starting_mb -= memory_mb

    def _start(self, message: dict, memory_mb: int) -> dict:
        # This host answers for the rollout from now on (a slow reset is not an orphan: its host is alive).
        claimed = Rollout.objects.filter(pk=message["rollout"], status=RolloutStatus.RUNNING).update(
            worker=f"episode-host:{self.id}", heartbeat_at=timezone.now()
        )
        if not claimed:
            # Its caller gave up (and ended it) before this host took the request.
            raise routing.HostError("This episode's rollout ended before a host could start it.", 409)
        rollout = Rollout.objects.select_related("run__environment_version__environment", "run__agent").get(
            pk=message["rollout"]
        )
        driver = message.get("driver") or "session"
        setup = episode_setup(rollout=rollout, driver=driver)
        sandbox = None
        if (self.sandbox_pool is not None and setup.kind == "python" and setup.concurrent_sessions == 1
                and setup.sandbox_config(self.sandbox_pool.config) == self.sandbox_pool.config):
            with self.sandbox_pool_lock:
                sandbox = self.sandbox_pool.acquire()
        try:
            episode = episode_start(setup=setup, sandbox=sandbox)
        except EpisodeFault as fault:
            raise routing.HostError(f"The environment did not start: {fault.reason}", 409) from None
        episode_id = message["episode"]
        held = HeldEpisode(episode_id=episode_id, team_id=rollout.team_id, driver=driver, episode=episode, memory_mb=memory_mb)
        with self.lock:
            self.held[episode_id] = held
        routing.route_set(self.redis, episode_id=episode_id, host_id=self.id, team_id=rollout.team_id, rollout_id=rollout.pk)
        return {"episode_id": episode_id, "host": self.id, **self._state(held)}

    def step(self, held: HeldEpisode, action, pipe=None) -> dict:
        """One step; its journal entry goes on `pipe` (sent before the reply), or at once without one."""
        episode = held.episode
        with episode.lock:
            held.last_used = time.monotonic()
            if episode.finished:
                raise routing.HostError("This episode is finished.", 404)
            try:
                step = episode_step(episode=episode, action=action)
            except EpisodeOver as exc:
                raise routing.HostError(f"{exc} Close it, or open a new one.", 409) from None
            except EpisodeFault as fault:
                self._forget(held)
                raise routing.HostError(f"The environment failed: {fault.reason}", 409) from None
            if held.driver == "play" or len(episode.writer.pending) >= FLUSH_EVERY_STEPS:
                self._flush_now(episode, step, pipe)
            else:
                self._journal(episode, step, pipe)
            # Otherwise the reaper flushes (every ~0.2 s, as the worker does): a step's round trip
            # touches no database.
            if step.get("artifact_url"):
                episode.artifact_url = step["artifact_url"]
            return step_json(step, done=episode.done)

    def _flush_now(self, episode: Episode, step: dict, pipe) -> None:
        """Write the episode's steps at once (a person's pace: the screenshot gets its URL now). If the
        database refuses, the steps stay buffered for the reaper and this one is journaled instead."""
        journaled = len(episode.writer.pending) - 1
        try:
            episode_flush(episode=episode)
        except LostOwnership:
            raise
        except Exception:  # noqa: BLE001 - the step happened: answer it, write it later
            logger.warning("episode host %s: could not write the steps of rollout %s now; the reaper retries",
                           self.id, episode.rollout.pk, exc_info=True)
            self._journal(episode, step, pipe)
            return
        journal_trim(self.redis, [(episode.rollout.pk, journaled)])

    def _journal(self, episode: Episode, step: dict, pipe) -> None:
        """Journal an answered step: on `pipe` (sent with the reply, before it) or at once."""
        if pipe is not None:
            journal_append(pipe, rollout_id=episode.rollout.pk, step=step)
            return
        try:
            journal_append(self.redis, rollout_id=episode.rollout.pk, step=step)
        except redis.RedisError:
            # The step is still buffered for the next write; only this host dying first would lose it.
            logger.warning("episode host %s: could not journal step %s of rollout %s", self.id, step["index"],
                           episode.rollout.pk, exc_info=True)

    def _step_one(self, item: dict) -> dict:
        try:
            held = self._held(item)
            return {"ok": True, **self.step(held, item.get("action"))}
        except routing.HostError as exc:
            return {"ok": False, "episode_id": item.get("episode"), "error": str(exc), "status": exc.status}

    def observe(self, held: HeldEpisode) -> dict:
        with held.episode.lock:
            return self._state(held)

    def _state(self, held: HeldEpisode) -> dict:
        episode = held.episode
        return {
            "rollout_id": episode.rollout.pk, "run_id": episode.rollout.run_id, "observation": episode.observation,
            "reset_info": episode.reset_info, "tools": episode.tools, "action_space": episode.action_space,
            "observation_space": episode.observation_space, "action_schema": episode.action_schema, "env_state": episode.env_state, "artifact_url": episode.artifact_url,
            "done": episode.done, "end_reason": episode.end_reason, "step_count": episode.writer.step_count,
        }

    def close(self, held: HeldEpisode, *, timed_out_reason: str = "") -> dict:
        episode = held.episode
        with episode.lock:
            try:
                end_reason = "finished" if held.driver == "play" else "closed"
                rollout = episode_finish(episode=episode, end_reason=end_reason, timed_out_reason=timed_out_reason)
            finally:
                self._forget(held)
        return {"rollout_id": rollout.pk}

    def _forget(self, held: HeldEpisode) -> None:
        """The episode is over (its steps written): let go of it, its route and its step journal."""
        with self.lock:
            self.held.pop(held.id, None)
        journal_drop(self.redis, held.episode.rollout.pk)
        try:
            self.redis.delete(routing.route_key(held.id))
        except redis.RedisError:
            pass

    # -- the reaper -----------------------------------------------------------------------------

    def _announce(self) -> None:
        routing.announce_host(self.redis, self.id, self.direct.announced if self.direct is not None else None)

    def _announce_forever(self) -> None:
        """Presence on a thread of its own: a reaper busy writing a large batch must not let it lapse."""
        while not self.stopping.wait(BEAT_EVERY_S):
            try:
                self._announce()
            except redis.RedisError:
                logger.warning("episode host %s: could not renew its presence in Redis", self.id, exc_info=True)

    def _reap_forever(self) -> None:
        last_beat = last_sweep = 0.0
        while not self.stopping.wait(REAP_EVERY_S):
            now = time.monotonic()
            try:
                close_old_connections()
                self.reap_once(now=now)
                if now - last_beat >= BEAT_EVERY_S:
                    self.beat()
                    last_beat = now
                if now - last_sweep >= SWEEP_EVERY_S:
                    end_orphaned_episodes()
                    last_sweep = now
            except Exception:  # noqa: BLE001 - the reaper must outlive a database or Redis hiccup
                logger.exception("episode host %s: reaper round failed", self.id)
        connection.close()

    def reap_once(self, *, now: float) -> None:
        """Close idle episodes; write every held episode's due steps in one statement."""
        taken = []
        for held in list(self.held.values()):
            episode = held.episode
            if not episode.lock.acquire(blocking=False):
                continue  # a step is in progress: it is not idle
            try:
                if episode.finished:
                    continue
                idle_s = idle_timeout_s(held.driver)
                if now - held.last_used > idle_s:
                    what = "play" if held.driver == "play" else "session"
                    reason = f"the {what} was idle for more than {idle_s:g} s"
                    try:
                        episode_finish(episode=episode, end_reason="idle_timeout", timed_out_reason=reason)
                    finally:
                        self._forget(held)
                    continue
                if episode.writer.pending and (episode.done or episode.writer.due()):
                    taken.append((episode.writer, *episode.writer.take()))
            finally:
                episode.lock.release()
        if taken:
            try:
                lost = {id(writer) for writer in flush_together(taken)}
            except Exception:
                # Not written: the steps go back to the head of their writers (and stay journaled).
                by_writer = {id(writer): steps for writer, steps, _, _ in taken}
                for held in list(self.held.values()):
                    steps = by_writer.get(id(held.episode.writer))
                    if steps:
                        with held.episode.lock:
                            held.episode.writer.give_back(steps)
                raise
            journal_trim(self.redis, [(writer.rollout.pk, len(steps)) for writer, steps, _, _ in taken])
            for held in list(self.held.values()):
                if id(held.episode.writer) in lost:
                    self._drop(held, "its rollout was ended elsewhere")

    def _drop(self, held: HeldEpisode, why: str) -> None:
        """Let go of an episode whose rollout is no longer ours: close its sandbox, write nothing."""
        logger.warning("episode host %s: dropping episode %s: %s", self.id, held.id, why)
        with held.episode.lock:
            held.episode.finished = True
            held.episode.sandbox.close()
        self._forget(held)

    def beat(self) -> None:
        """Renew its rollouts' heartbeats, then this host's presence and the routes of its episodes.
        The database first: a Redis outage must not make live episodes look orphaned."""
        held = list(self.held.values())
        if held:
            Rollout.objects.filter(pk__in=[item.episode.rollout.pk for item in held], status=RolloutStatus.RUNNING).update(
                heartbeat_at=timezone.now()
            )
        self._announce()
        if not held:
            return
        # Routes are renewed (and restored after Redis lost its data) from what this host holds.
        pipe = self.redis.pipeline(transaction=False)
        for item in held:
            pipe.set(
                routing.route_key(item.id), f"{self.id}|{item.team_id}|{item.episode.rollout.pk}", ex=routing.ROUTE_TTL_S
            )
        pipe.execute()

    def shutdown(self) -> None:
        """End every held episode (errored: their sandboxes go with this host) and stop."""
        self.stopping.set()
        for held in list(self.held.values()):
            episode = held.episode
            try:
                with episode.lock:
                    episode_fail(episode=episode, fault=EpisodeFault(
                        RolloutStatus.ERRORED, f"the episode host {self.id} shut down while this episode was open", "error"
                    ))
            except Exception:  # noqa: BLE001 - end as many as possible
                logger.exception("episode host %s: could not end episode %s", self.id, held.id)
            self._forget(held)
        try:
            routing.retire_host(self.redis, self.id)
        except redis.RedisError:
            pass
        if self.direct is not None:
            self.direct.close()
        if self.sandbox_pool is not None:
            self.sandbox_pool.close()
        self.step_pool.shutdown(wait=False, cancel_futures=True)
        self.batch_pool.shutdown(wait=False, cancel_futures=True)
        self.start_pool.shutdown(wait=False, cancel_futures=True)

    def install_signal_handlers(self) -> None:
        def stop(signum, frame):
            self.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def end_orphaned_episodes(*, stale_s: float | None = None) -> list[int]:
    """Running interactive rollouts whose host stopped beating: end them errored with the reason.
    Safe from any process (hosts run it, and so do workers' recovery rounds)."""

    stale_s = stale_after_s() if stale_s is None else stale_s
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    ended = []
    for rollout in Rollout.objects.filter(
        status=RolloutStatus.RUNNING, run__agent__kind__in=INTERACTIVE_AGENT_KINDS, heartbeat_at__lt=cutoff
    ).select_related("run"):
        holder = rollout.worker.removeprefix("episode-host:")
        if holder != rollout.worker and routing.host_is_alive(holder):
            continue
        if episode_orphan_end(rollout=rollout, error=f"the episode host holding this episode ({holder or 'unknown'})"
                                                     " stopped before it was closed"):
            ended.append(rollout.pk)
    return ended


def episode_orphan_end(*, rollout: Rollout, error: str) -> bool:
    """End an interactive rollout whose host is gone: first store the steps its host had answered
    but not yet written (its journal), then end it errored with the reason."""
    r = routing.client()
    try:
        steps = journal_steps(r, rollout.pk)
    except redis.RedisError:
        logger.warning("could not read the step journal of rollout %s", rollout.pk, exc_info=True)
        steps = []
    steps_recover(rollout=rollout, steps=steps)
    ended = rollout_end(rollout=rollout, status=RolloutStatus.ERRORED, end_reason=INFRA_ERROR, error=error)
    journal_drop(r, rollout.pk)
    return ended
