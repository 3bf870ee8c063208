"""Replay of a 10,000-step rollout in headless Chromium: time to first paint of the viewer and to
step to arbitrary positions. Target: under 1 s each.

    .venv/bin/python bench/bench_replay.py [--steps 10000]

Uses the development database (DATABASE_URL, default `studio`) in a throwaway team it deletes after.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402

from environments import services as env_services  # noqa: E402
from runs.models import Agent, Rollout, RolloutStatus, Run, Step  # noqa: E402
from studio.models import Membership, Role, Team  # noqa: E402
from tests.processes import free_port  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def drop_team():
    Run.objects.filter(team__slug="bench-replay").delete()  # runs protect their versions and agents
    Team.objects.filter(slug="bench-replay").delete()


def build(steps: int):
    drop_team()
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="bench-replay")
    user.set_password("bench-replay-pass")
    user.save()
    team = Team.objects.create(slug="bench-replay", name="Bench replay")
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    env = env_services.environment_create(team=team, actor=user, name="Long", slug="long")
    version = env_services.version_commit(environment=env, actor=user, message="bench")
    agent = Agent.objects.create(team=team, name="random", kind="random")
    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0])
    rollout = Rollout.objects.create(team=team, run=run, task_id="t1", seed=0, status=RolloutStatus.SUCCEEDED,
                                     step_count=steps, total_reward=steps * 0.01, verifier_reward=1.0,
                                     verifier_reason="bench", initial_observation={"grid": [[0] * 8] * 8, "pos": 0})
    rng = random.Random(0)
    Step.objects.bulk_create(
        [Step(rollout=rollout, index=i, action=rng.randrange(4),
              observation={"grid": [[(i + r) % 3 for _ in range(8)] for r in range(8)], "pos": i, "text": f"step {i}"},
              reward=0.01, terminated=i == steps - 1, info={"i": i}) for i in range(steps)],
        batch_size=2000,
    )
    return team, rollout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--jumps", type=int, default=20)
    args = parser.parse_args()
    team, rollout = build(args.steps)
    port = free_port()
    server = subprocess.Popen([str(REPO / ".venv/bin/uvicorn"), "studio.asgi:application", "--port", str(port), "--log-level", "warning"],
                              cwd=REPO, start_new_session=True)
    try:
        time.sleep(2.5)
        from playwright.sync_api import sync_playwright

        base = f"http://127.0.0.1:{port}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"), args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/accounts/login/")
            page.fill("input[name=username]", "bench-replay")
            page.fill("input[name=password]", "bench-replay-pass")
            page.click("button[type=submit]")
            paints = []
            for _ in range(5):
                t0 = time.perf_counter()
                page.goto(f"{base}/t/bench-replay/rollouts/{rollout.pk}/")
                page.wait_for_selector("#replay.ready")
                page.wait_for_function("document.getElementById('replay-position').textContent.startsWith('step 0 ')")
                paints.append(time.perf_counter() - t0)
            rng = random.Random(1)
            jumps = []
            for _ in range(args.jumps):
                target = rng.randrange(args.steps)
                t0 = time.perf_counter()
                page.evaluate(f"window.studioReplay.goTo({target})")
                page.wait_for_function(f"document.getElementById('replay-position').textContent.startsWith('step {target} ')")
                jumps.append(time.perf_counter() - t0)
            steps = []
            for _ in range(20):
                t0 = time.perf_counter()
                before = page.evaluate("window.studioReplay.state.pos")
                page.keyboard.press("ArrowRight")
                page.wait_for_function(f"document.getElementById('replay-position').textContent.startsWith('step {before + 1} ')")
                steps.append(time.perf_counter() - t0)
            browser.close()
    finally:
        server.kill()
        drop_team()

    def row(name, xs):
        xs = sorted(xs)
        p95 = xs[min(len(xs) - 1, int(len(xs) * 0.95))]
        print(f"| {name:<42} | {statistics.median(xs) * 1000:8.0f} | {p95 * 1000:8.0f} | {'yes' if p95 < 1 else 'NO':^9} |")

    print(f"\nReplay viewer, rollout of {args.steps:,} steps, headless Chromium\n")
    print(f"| {'measure':<42} | {'median ms':>8} | {'p95 ms':>8} | {'< 1 s':^9} |")
    print(f"|{'-' * 44}|{'-' * 10}|{'-' * 10}|{'-' * 11}|")
    row("page load to first step painted", paints)
    row(f"jump to a random position ({args.jumps}x)", jumps)
    row("step forward with the keyboard (20x)", steps)


if __name__ == "__main__":
    main()
