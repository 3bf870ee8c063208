"""Sandbox speed: start-to-first-observation (cold process vs pre-warmed pool) and steps/s through
the sandbox vs the same environment stepped in a bare Python loop.

    .venv/bin/python bench/bench_sandbox.py [--starts 30] [--steps 5000]
"""

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs.sandbox import ProcessSandbox, SandboxConfig, SandboxPool  # noqa: E402
from runs.sandbox.process import SDK_PATH  # noqa: E402

TRIVIAL_ENV = """
from studio_sdk import Environment

class Trivial(Environment):
    def reset(self, task, seed):
        self.t = 0
        return {"t": 0}

    def step(self, action):
        self.t += 1
        return {"t": self.t}, 1.0, False, False, {}
"""


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def time_starts(count, start):
    """Seconds from asking for a sandbox to holding the first observation, `count` times."""
    timings = []
    for _ in range(count):
        began = time.perf_counter()
        sandbox = start()
        sandbox.reset({"id": "t"}, seed=0)
        timings.append(time.perf_counter() - began)
        sandbox.close()
    return timings


def bare_steps_per_second(steps):
    sys.path.insert(0, str(SDK_PATH))
    module = types.ModuleType("trivial_env")
    exec(TRIVIAL_ENV, module.__dict__)
    env = module.Trivial()
    env.reset({"id": "t"}, 0)
    began = time.perf_counter()
    for _ in range(steps):
        env.step(0)
    return steps / (time.perf_counter() - began)


def sandbox_steps_per_second(steps):
    with ProcessSandbox() as sandbox:
        sandbox.start({"env.py": TRIVIAL_ENV}, entrypoint="env:Trivial")
        sandbox.reset({"id": "t"}, seed=0)
        began = time.perf_counter()
        for _ in range(steps):
            sandbox.step(0)
        return steps / (time.perf_counter() - began)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    files = {"env.py": TRIVIAL_ENV}

    rows = []

    def cold_start(entrypoint, files, config=None):
        def start():
            sandbox = ProcessSandbox(config) if config else ProcessSandbox()
            sandbox.start(files, entrypoint=entrypoint)
            return sandbox

        return start

    # The peer, measured in the same run: the same start without the view, cgroup and workspace
    # quota of a full sandbox (what a weak sandbox, allowed by the operator, gets), interleaved so
    # load on the machine hits both alike.
    weak = SandboxConfig(view=False, allow_weak=True)
    full_timings, weak_timings = [], []
    for _ in range(args.starts):
        full_timings += time_starts(1, cold_start("env:Trivial", files))
        weak_timings += time_starts(1, cold_start("env:Trivial", files, weak))
    rows.append(("cold process, env.py (view + pid ns + cgroup + quota)", full_timings))
    rows.append(("cold process, env.py, weak peer (uid + netns only)", weak_timings))

    for label, entrypoint, env_files, preload in [
        ("env.py", "env:Trivial", files, ("studio_sdk",)),
        ("gymnasium:CartPole-v1", "gymnasium:CartPole-v1", {}, ("studio_sdk", "numpy", "gymnasium")),
    ]:
        if label != "env.py":
            rows.append((f"cold process, {label}", time_starts(args.starts, cold_start(entrypoint, env_files))))
        with SandboxPool(size=2, config=SandboxConfig(preload=preload)) as pool:
            time.sleep(1.0)  # let the first runners finish warming up
            def pooled(pool=pool, entrypoint=entrypoint, env_files=env_files):
                return pool.start(env_files, entrypoint=entrypoint)
            # The pool refills as it hands out; pace requests like a worker would between rollouts.
            timings = []
            for _ in range(args.starts):
                timings += time_starts(1, pooled)
                time.sleep(0.3 if "gymnasium" in preload else 0.05)
            note = f"pool (preload {'+'.join(preload)})"
            rows.append((f"{note}, {label}", timings))

    print(f"start to first observation ({args.starts} starts each, as root={os.geteuid() == 0})")
    print(f"{'':60} {'median ms':>10} {'p95 ms':>10}")
    for label, timings in rows:
        print(f"{label:60} {statistics.median(timings) * 1000:10.1f} {percentile(timings, 0.95) * 1000:10.1f}")
    print(f"full sandbox / weak peer, median: {statistics.median(full_timings) / statistics.median(weak_timings):.2f}x")

    bare = bare_steps_per_second(args.steps * 20)
    through = sandbox_steps_per_second(args.steps)
    print()
    print(f"trivial env steps/s: bare loop {bare:,.0f}, through sandbox {through:,.0f}, "
          f"ratio {bare / through:,.0f}x ({1e6 / through:.0f} us per sandboxed step)")


if __name__ == "__main__":
    main()
