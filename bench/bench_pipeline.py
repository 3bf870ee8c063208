"""Rollout pipeline speed and memory: steps/s of a trivial env through the whole worker path (sandbox
IPC, agent, batched step writes, live publish) vs the same env in a bare loop, with the database round
trips a rollout costs the worker (statements, BEGIN/COMMIT pairs and new connections, as a Celery
worker runs it: connections kept across tasks); worker RSS across consecutive rollouts.

Before issue 16's worker bookkeeping (claim with SELECT FOR UPDATE, run-row lock per status change, a
connection per task, the reset observation written apart) a 100-step rollout took 30-32 round trips.

    .venv/bin/python bench/bench_pipeline.py [--steps 20000] [--rollouts 30] [--rollout-steps 2000]

Uses the dev database (DATABASE_URL, default `studio`, migrated) and Redis; creates team `bench`.
"""
import argparse
import cProfile
import io
import os
import pstats
import random
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

import django  # noqa: E402

django.setup()

from django.db import close_old_connections  # noqa: E402

from environments import services as env_services  # noqa: E402
from environments.models import Environment  # noqa: E402
from runs import services  # noqa: E402
from runs.models import Agent, Run  # noqa: E402
from runs.sandbox import ProcessSandbox, SandboxLimits  # noqa: E402
from runs.sandbox.process import SDK_PATH  # noqa: E402
from runs.tasks import execute_rollout  # noqa: E402
from studio.celery import keep_worker_database_connections  # noqa: E402

from bench_support import DatabaseRoundTrips  # noqa: E402
from studio.models import Team  # noqa: E402

TRIVIAL_ENV = """
from studio_sdk import Environment

class Trivial(Environment):
    action_space = {"type": "discrete", "n": 4}

    def reset(self, task, seed):
        self.t = 0
        return {"t": 0}

    def step(self, action):
        self.t += 1
        return {"t": self.t}, 1.0, False, False, {}

    def verify(self):
        return 1.0, "ok"
"""
SCRIPTED_AGENT = "def act(observation, info):\n    return observation['t'] % 4\n"


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def bench_version(max_steps: int):
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    files = {
        "environment.toml": (
            'name = "Trivial"\nkind = "python"\nentrypoint = "env:Trivial"\n'
            f"max_steps = {max_steps}\n\n[limits]\nstep_timeout_s = 5\nepisode_timeout_s = 3600\n"
        ),
        "env.py": TRIVIAL_ENV,
        "tasks.jsonl": '{"id": "t1", "difficulty": 1}\n',
    }
    env = Environment.objects.filter(team=team, slug="trivial").first()
    if env is None:
        env = env_services.environment_create(team=team, actor=None, name="Trivial", slug="trivial", files=files)
    latest = env.latest_version
    from environments import package

    if latest and latest.content_hash == package.content_hash(files):
        return team, latest
    return team, env_services.version_commit(environment=env, actor=None, message="bench", files=files)


def agent(team, kind):
    name = f"bench-{kind}"
    existing = Agent.objects.filter(team=team, name=name).first()
    return existing or services.agent_create(team=team, actor=None, name=name, kind=kind,
                                             code=SCRIPTED_AGENT if kind == "scripted" else "")


def bare_loop(steps: int) -> float:
    sys.path.insert(0, str(SDK_PATH))
    module = types.ModuleType("trivial_env")
    exec(TRIVIAL_ENV, module.__dict__)
    env = module.Trivial()
    rng = random.Random(0)
    env.reset({"id": "t1"}, 0)
    started = time.perf_counter()
    for _ in range(steps):
        env.step(rng.randrange(4))
    return steps / (time.perf_counter() - started)


def sandbox_only(steps: int) -> float:
    with ProcessSandbox() as sandbox:
        sandbox.start({"env.py": TRIVIAL_ENV}, entrypoint="env:Trivial", limits=SandboxLimits(episode_timeout_s=3600))
        sandbox.reset({"id": "t1"}, 0)
        rng = random.Random(0)
        started = time.perf_counter()
        for _ in range(steps):
            sandbox.step(rng.randrange(4))
        return steps / (time.perf_counter() - started)


def whole_path(team, version, kind: str, steps: int, profile: bool = False):
    """One rollout through the Celery task's body, as a worker runs it (Celery's Django fix-up closes
    old connections around each task); returns (steps/s, seconds, profiler, database round trips)."""
    run = services.run_create(team=team, actor=None, version=version, agent=agent(team, kind), seeds=[0],
                              limits={"max_steps": steps}, enqueue=False)
    rollout_id = run.rollouts.get().pk
    profiler = cProfile.Profile() if profile else None
    close_old_connections()
    with DatabaseRoundTrips() as trips:
        started = time.perf_counter()
        close_old_connections()
        if profiler:
            profiler.enable()
        execute_rollout(rollout_id)
        if profiler:
            profiler.disable()
        close_old_connections()
        elapsed = time.perf_counter() - started
    rollout = run.rollouts.get()
    assert rollout.step_count == steps, (rollout.status, rollout.error)
    return steps / elapsed, elapsed, profiler, trips.round_trips


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rollouts", type=int, default=30)
    parser.add_argument("--rollout-steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="episodes per path; the median is shown")
    parser.add_argument("--short-steps", type=int, default=100, help="steps of the rollouts whose round trips are counted")
    parser.add_argument("--short-rollouts", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one random rollout")
    args = parser.parse_args()

    team, version = bench_version(max_steps=max(args.steps, args.rollout_steps))
    keep_worker_database_connections()  # what a Celery worker does at start

    def median(measure):
        return statistics.median(measure() for _ in range(args.repeat))

    bare = median(lambda: bare_loop(args.steps))
    ipc = median(lambda: sandbox_only(args.steps))
    rows = [("bare Python loop", bare, None), ("sandbox IPC only (no DB, no agent)", ipc, None)]
    for kind in ("random", "scripted"):
        results = [whole_path(team, version, kind, args.steps) for _ in range(args.repeat)]
        rows.append((f"whole path, {kind} agent (incl. sandbox start, verify)", statistics.median(r[0] for r in results),
                     statistics.median(r[3] for r in results)))

    print(f"\nsteps/s, trivial env, {args.steps} steps per episode, median of {args.repeat}")
    print(f"{'path':<58}{'steps/s':>12}{'vs bare':>12}{'DB round trips':>16}")
    for name, rate, trips in rows:
        print(f"{name:<58}{rate:>12,.0f}{bare / rate:>11.0f}x{'' if trips is None else f'{trips:>16.0f}':>16}")
    random_rate, scripted_rate = rows[2][1], rows[3][1]
    print(f"targets: random agent >= 20,000 steps/s per worker: {'met' if random_rate >= 20000 else 'MISSED'}"
          f" ({random_rate / ipc:.2f}x the sandbox IPC alone); scripted within 1.5x of random:"
          f" {random_rate / scripted_rate:.2f}x {'met' if random_rate / scripted_rate <= 1.5 else 'MISSED'}")

    # The worker's bookkeeping per rollout: short rollouts, where it weighs most.
    short = [whole_path(team, version, "random", args.short_steps) for _ in range(args.short_rollouts)]
    trips = statistics.median(result[3] for result in short)
    wall_ms = statistics.median(result[1] for result in short) * 1000
    print(f"\n{args.short_steps}-step rollouts, median of {args.short_rollouts}: {trips:.0f} database round trips per"
          f" rollout (was 30-32 before issue 16), {wall_ms:.0f} ms wall per rollout incl. sandbox start")

    # Memory: the worker process across consecutive rollouts.
    samples = []
    for index in range(args.rollouts):
        whole_path(team, version, "random" if index % 2 == 0 else "scripted", args.rollout_steps)
        samples.append(rss_mb())
    warm = samples[min(2, len(samples) - 1)]
    growth = (samples[-1] - warm) / warm * 100
    print(f"\nworker RSS over {args.rollouts} rollouts of {args.rollout_steps} steps: "
          f"after 1: {samples[0]:.1f} MB, after 3: {warm:.1f} MB, last: {samples[-1]:.1f} MB, max: {max(samples):.1f} MB"
          f" -> {growth:+.1f}% after warm-up ({'flat within 10%' if abs(growth) <= 10 else 'NOT flat'})")

    if args.profile:
        _, _, profiler, _ = whole_path(team, version, "random", args.steps, profile=True)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())

    # Leave the dev database as it was: the bench's runs are of no further use.
    Run.objects.filter(team=team).delete()


if __name__ == "__main__":
    main()
