"""Browser environments: time to first observation, time per step (screenshot included) and rollouts
per minute with N concurrent browsers, on the demo sites (environments/demo_packages/web_*).

    .venv/bin/python bench/bench_browser.py [--starts 10] [--steps 40] [--concurrency 1,2,4] [--rollouts 8]

Each rollout is what a worker does, without the database: a browser sandbox (Chromium through
Playwright, in its own uid and network namespace) and the scripted agent in its own sandbox.
Ends by checking that no Chromium process of a sandbox uid is left.
"""

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.demo import DEMO_DIR, read_folder  # noqa: E402
from runs.sandbox import ProcessSandbox, SandboxLimits  # noqa: E402
from runs.sandbox.process import BROWSER_CONFIG  # noqa: E402

LIMITS = SandboxLimits(step_timeout_s=20, episode_timeout_s=120, memory_mb=1024)


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def demo(name):
    files = read_folder(DEMO_DIR / name)
    tasks = [json.loads(line) for line in files["tasks.jsonl"].splitlines() if line.strip()]
    entrypoint = next(line.split("=", 1)[1].strip().strip('"') for line in files["environment.toml"].splitlines()
                      if line.startswith("entrypoint"))
    return files, tasks, entrypoint


def start_env(files, entrypoint):
    env = ProcessSandbox(BROWSER_CONFIG)
    env.start(files, mode="env", entrypoint=entrypoint, limits=LIMITS.for_browser())
    return env


def rollout(files, entrypoint, task, step_times=None):
    """One episode of the demo's agent.py; returns (verifier reward, seconds to first observation)."""
    started = time.perf_counter()
    env = start_env(files, entrypoint)
    agent = ProcessSandbox()
    try:
        observation = env.reset(task, 0)
        first = time.perf_counter() - started
        agent.start({"agent.py": files["agent.py"]}, mode="agent", entrypoint="agent", limits=SandboxLimits())
        agent.reset({k: v for k, v in task.items() if k != "answer"}, 0)
        info = {}
        for _ in range(30):
            action = agent.act(observation, info)
            t0 = time.perf_counter()
            observation, _reward, terminated, truncated, info = env.step(action)
            if step_times is not None:
                step_times.append(time.perf_counter() - t0)
            if terminated or truncated:
                break
        reward, _reason = env.verify()
        return reward, first
    finally:
        agent.close()
        env.close()


def bench_first_observation(starts):
    files, tasks, entrypoint = demo("web_form")
    cold, again = [], []
    for _ in range(starts):
        t0 = time.perf_counter()
        env = start_env(files, entrypoint)
        try:
            env.reset(tasks[0], 0)
            cold.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            env.reset(tasks[0], 1)  # same sandbox and browser, a fresh context
            again.append(time.perf_counter() - t1)
        finally:
            env.close()
    return cold, again


def bench_pooled_first_observation(starts):
    """What a worker sees with BROWSER_POOL_SIZE=1: the next sandbox already runs Chromium."""
    from runs.sandbox import SandboxPool
    from runs.sandbox.process import BROWSER_WARM_CONFIG

    files, tasks, entrypoint = demo("web_form")
    times = []
    with SandboxPool(size=1, config=BROWSER_WARM_CONFIG) as pool:
        for _ in range(starts):
            time.sleep(2.5)  # the gap between two rollouts, in which the pool's Chromium starts
            t0 = time.perf_counter()
            env = pool.acquire()
            try:
                env.start(files, mode="env", entrypoint=entrypoint, limits=LIMITS.for_browser())
                env.reset(tasks[0], 0)
                times.append(time.perf_counter() - t0)
            finally:
                env.close()
    return times


def bench_steps(steps):
    times, rewards = [], []
    for name in ("web_form", "web_shop"):
        files, tasks, entrypoint = demo(name)
        while len(times) < steps * (1 if name == "web_form" else 2):
            for task in tasks:
                rewards.append(rollout(files, entrypoint, task, times)[0])
    return times, rewards


def bench_throughput(concurrency, count):
    files, tasks, entrypoint = demo("web_shop")
    jobs = [tasks[i % len(tasks)] for i in range(count)]
    lock = threading.Lock()
    rewards, firsts = [], []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                task = jobs.pop()
            reward, first = rollout(files, entrypoint, task)
            with lock:
                rewards.append(reward)
                firsts.append(first)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    return count / elapsed * 60.0, rewards, firsts


def leftover_chromium():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.browser_envs.chromium_processes import sandbox_chromium_pids

    time.sleep(1.0)
    return sandbox_chromium_pids()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--rollouts", type=int, default=8)
    args = parser.parse_args()

    ms = lambda seconds: f"{seconds * 1000:8.0f} ms"  # noqa: E731
    rows = []
    cold, again = bench_first_observation(args.starts)
    rows.append(("first observation, new sandbox + Chromium (web_form)", ms(statistics.median(cold)), ms(percentile(cold, 0.95)), len(cold)))
    rows.append(("first observation, warm browser, new context", ms(statistics.median(again)), ms(percentile(again, 0.95)), len(again)))
    pooled = bench_pooled_first_observation(args.starts)
    rows.append(("first observation, pooled sandbox (engine default)", ms(statistics.median(pooled)), ms(percentile(pooled, 0.95)), len(pooled)))
    step_times, rewards = bench_steps(args.steps)
    rows.append(("step incl. screenshot (web_form + web_shop agents)", ms(statistics.median(step_times)), ms(percentile(step_times, 0.95)), len(step_times)))
    print(f"{'measure':58} {'median':>11} {'p95':>11} {'n':>5}")
    for name, median, p95, n in rows:
        print(f"{name:58} {median:>11} {p95:>11} {n:>5}")
    print(f"scripted agents solved {sum(r == 1.0 for r in rewards)}/{len(rewards)} rollouts")
    print()
    print(f"{'concurrent browsers':>20} {'rollouts/min':>13} {'first obs median':>17} {'solved':>8}")
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        per_minute, rewards, firsts = bench_throughput(concurrency, args.rollouts)
        print(f"{concurrency:>20} {per_minute:>13.1f} {ms(statistics.median(firsts)):>17} {sum(r == 1.0 for r in rewards):>4}/{len(rewards)}")
    left = leftover_chromium()
    print()
    print("Chromium processes of sandbox uids left:", len(left))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
