"""Image observations through the whole worker path: steps/s of the pixel-catch demo (a 210x160x3
uint8 frame every step) bare vs through the sandbox, the agent sandbox, PNG storage and batched step
writes, in one run; and the bytes stored per frame (artifact files plus the step row). With
`--atari`, also Atari Pong through ale-py (the atari_pong demo, its dependency environment built
first): ALE stepped bare in that environment vs the whole path with the demo's pixel agent.

    .venv/bin/python bench/bench_images.py [--steps 2000] [--repeat 3] [--atari]

Targets (issue 12): at least 500 steps/s per worker through the whole path, under 30 KB stored per
frame. Uses the dev database (DATABASE_URL, created and migrated if missing) and Redis; creates team
`bench`; artifacts go to a temporary MEDIA_ROOT that is removed at the end.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MEDIA = tempfile.mkdtemp(prefix="bench-images-")
os.environ["MEDIA_ROOT"] = MEDIA  # before settings are read: the artifacts of this bench only
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

from bench.bench_support import prepare_database  # noqa: E402

prepare_database(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/studio"))

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from environments import package  # noqa: E402
from environments import services as env_services  # noqa: E402
from environments.demo import DEMO_DIR, read_folder  # noqa: E402
from environments.models import Environment  # noqa: E402
from runs import services  # noqa: E402
from runs.models import Agent, Run  # noqa: E402
from runs.sandbox import ProcessSandbox, SandboxLimits  # noqa: E402
from runs.sandbox.process import SDK_PATH  # noqa: E402
from runs.tasks import execute_rollout  # noqa: E402
from studio.models import Team  # noqa: E402

DEMO = DEMO_DIR / "pixel_catch"
TASK = {"id": "bench", "difficulty": 1, "balls": 1_000_000, "speed": 3}


def bench_files() -> dict:
    files = read_folder(DEMO)
    files["tasks.jsonl"] += json.dumps(TASK) + "\n"
    return files


def bench_version():
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    files = bench_files()
    env = Environment.objects.filter(team=team, slug="pixel-catch").first()
    if env is None:
        env = env_services.environment_create(team=team, actor=None, name="Pixel catch", slug="pixel-catch", files=files)
    latest = env.latest_version
    if latest and latest.content_hash == package.content_hash(files):
        return team, latest
    return team, env_services.version_commit(environment=env, actor=None, message="bench", files=files)


def agent(team, kind):
    name = f"bench-pixels-{kind}"
    existing = Agent.objects.filter(team=team, name=name).first()
    code = (DEMO / "agent.py").read_text() if kind == "scripted" else ""
    return existing or services.agent_create(team=team, actor=None, name=name, kind=kind, code=code)


def load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bare_loop(steps: int, *, with_agent: bool) -> float:
    """The environment (and the scripted agent) stepped in this process: no sandbox, no storage."""
    sys.path.insert(0, str(SDK_PATH))
    env = load(DEMO / "env.py", "pixel_catch_env").PixelCatch()
    act = load(DEMO / "agent.py", "pixel_catch_agent").act if with_agent else None
    rng = random.Random(0)
    observation = env.reset(TASK, 0)
    started = time.perf_counter()
    for _ in range(steps):
        action = act(observation, {}) if act else rng.randrange(3)
        observation, *_ = env.step(action)
    return steps / (time.perf_counter() - started)


def sandbox_only(steps: int) -> float:
    """The environment in its sandbox, every frame crossing the boundary; no agent, no storage."""
    with ProcessSandbox() as sandbox:
        sandbox.start(bench_files(), entrypoint="env:PixelCatch", limits=SandboxLimits(episode_timeout_s=3600))
        sandbox.reset(TASK, 0)
        rng = random.Random(0)
        started = time.perf_counter()
        for _ in range(steps):
            sandbox.step(rng.randrange(3))
        return steps / (time.perf_counter() - started)


def whole_path(team, version, kind: str, steps: int):
    run = services.run_create(team=team, actor=None, version=version, agent=agent(team, kind), task_ids=["bench"],
                              seeds=[0], limits={"max_steps": steps, "episode_timeout_s": 3600}, enqueue=False)
    rollout = run.rollouts.get()
    started = time.perf_counter()
    execute_rollout(rollout.pk)
    elapsed = time.perf_counter() - started
    rollout.refresh_from_db()
    assert rollout.step_count == steps, (rollout.status, rollout.error)
    return steps / elapsed, stored_per_frame(rollout, steps)


ATARI_BARE = """
import sys, time, gymnasium, ale_py
sys.path.insert(0, sys.argv[2])
import agent
gymnasium.register_envs(ale_py)
env = gymnasium.make("ALE/Pong-v5", repeat_action_probability=0.0)
observation, info = env.reset(seed=0)
steps = int(sys.argv[1])
started = time.perf_counter()
for _ in range(steps):
    observation, reward, terminated, truncated, info = env.step(agent.act(observation, info))
    if terminated or truncated:
        observation, info = env.reset()
print(steps / (time.perf_counter() - started))
"""


def atari_rows(team, steps: int, repeat: int) -> list:
    """Pong bare (ALE and the pixel agent in one process, in the dependency environment) and through
    the whole path; [] with a note when its dependency environment cannot be built here."""
    import subprocess

    from environments.dependencies import services as dependency_services

    files = read_folder(DEMO_DIR / "atari_pong")
    env = Environment.objects.filter(team=team, slug="atari-pong").first() or env_services.environment_create(
        team=team, actor=None, name="Atari Pong", slug="atari-pong", files=files)
    version = env.latest_version
    if version is None or version.content_hash != package.content_hash(files):
        version = env_services.version_commit(environment=env, actor=None, message="bench", files=files)
    if dependency_services.dependency_environment_build(depenv_id=version.dependency_environment_id) != "ready":
        version.dependency_environment.refresh_from_db()
        print(f"(no Atari rows: its dependency environment did not build: {version.dependency_environment.error[:200]})")
        return []
    dependency_services.dependency_environment_check_versions(depenv_id=version.dependency_environment_id)
    version.dependency_environment.refresh_from_db()  # built (and its entrypoint checked) since it was read
    site = dependency_services.version_python_path(version)[1]

    def bare():
        out = subprocess.run(["/usr/bin/python3", "-c", ATARI_BARE, str(steps), str(DEMO_DIR / "atari_pong")],
                             env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])

    name = "bench-pong-scripted"
    pong_agent = Agent.objects.filter(team=team, name=name).first() or services.agent_create(
        team=team, actor=None, name=name, kind="scripted", code=(DEMO_DIR / "atari_pong" / "agent.py").read_text())

    def whole():
        run = services.run_create(team=team, actor=None, version=version, agent=pong_agent, task_ids=["pong"], seeds=[0],
                                  limits={"max_steps": steps, "episode_timeout_s": 3600}, enqueue=False)
        rollout = run.rollouts.get()
        started = time.perf_counter()
        execute_rollout(rollout.pk)
        elapsed = time.perf_counter() - started
        rollout.refresh_from_db()
        assert rollout.status in ("succeeded", "failed") and rollout.step_count, (rollout.status, rollout.error)
        return rollout.step_count / elapsed  # a game may end (21 points) before `steps`

    try:
        return [("Atari Pong bare (ALE + pixel agent, one process)", statistics.median(bare() for _ in range(repeat))),
                ("Atari Pong whole path, scripted pixel agent", statistics.median(whole() for _ in range(repeat)))]
    finally:
        Run.objects.filter(team=team, environment_version=version).delete()


def stored_per_frame(rollout, steps: int) -> tuple[float, float]:
    """(artifact bytes, step row bytes) per step."""
    folder = Path(MEDIA) / "artifacts" / "rollouts" / str(rollout.pk)
    files = sum(path.stat().st_size for path in folder.glob("*"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(pg_column_size(s.*)) FROM runs_step s WHERE rollout_id = %s", [rollout.pk])
        row_bytes = cursor.fetchone()[0] or 0
    return files / steps, row_bytes / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="episodes per path; the median is shown")
    parser.add_argument("--atari", action="store_true", help="also Atari Pong through ale-py (builds its dependency environment)")
    args = parser.parse_args()
    team, version = bench_version()
    try:
        def median(measure):
            return statistics.median(measure() for _ in range(args.repeat))

        bare = median(lambda: bare_loop(args.steps, with_agent=False))
        bare_agent = median(lambda: bare_loop(args.steps, with_agent=True))
        ipc = median(lambda: sandbox_only(args.steps))
        rows = [("bare loop, env only", bare), ("bare loop, env + pixel agent", bare_agent),
                ("env sandbox only (frames over the boundary)", ipc)]
        stored = {}
        whole_path(team, version, "scripted", 50)  # warm-up: first-use imports of the worker path
        for kind in ("random", "scripted"):
            results = [whole_path(team, version, kind, args.steps) for _ in range(args.repeat)]
            rows.append((f"whole path, {kind} agent (sandboxes, PNG storage, DB)", statistics.median(r[0] for r in results)))
            stored[kind] = results[-1][1]

        load = os.getloadavg()[0]
        print(f"\nsteps/s, pixel catch (210x160x3 uint8 frames), {args.steps} steps per episode, median of {args.repeat}"
              f" (load average {load:.1f} on {os.cpu_count()} CPUs)")
        print(f"{'path':<58}{'steps/s':>10}{'bare/path':>11}")
        for name, rate in rows:
            print(f"{name:<58}{rate:>10,.0f}{bare / rate:>10.1f}x")
        if args.atari:
            pong = atari_rows(team, args.steps, args.repeat)
            if pong:
                print(f"{'':<58}{'steps/s':>10}{'bare/path':>11}")
                for name, rate in pong:
                    print(f"{name:<58}{rate:>10,.0f}{pong[0][1] / rate:>10.1f}x")
        print(f"\nstored per frame{'':<42}{'files':>10}{'step row':>11}")
        for kind, (files, row) in stored.items():
            print(f"{kind + ' agent':<58}{files / 1024:>8.2f}KB{row / 1024:>9.2f}KB")
        whole = min(rate for name, rate in rows if name.startswith("whole path"))
        print(f"\n(a 2-core machine shared with other work: load average {os.getloadavg()[0]:.1f} at the end;"
              " the ratios are the figures to compare between runs)")
        per_frame = max(files + row for files, row in stored.values())
        print(f"\ntargets: >= 500 steps/s per worker through the whole path: {whole:,.0f} "
              f"{'met' if whole >= 500 else 'MISSED'}; < 30 KB stored per frame: {per_frame / 1024:.2f} KB "
              f"{'met' if per_frame < 30 * 1024 else 'MISSED'} (a raw frame is {210 * 160 * 3 / 1024:.0f} KB)")
    finally:
        Run.objects.filter(team=team, environment_version=version).delete()
        shutil.rmtree(MEDIA, ignore_errors=True)


if __name__ == "__main__":
    main()
