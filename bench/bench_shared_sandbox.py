"""Shared-sandbox episodes: memory per open episode and step latency when many episodes share one
sandbox process (environment.toml `concurrent_sessions`), vs one ProcessSandbox per episode.

    .venv/bin/python bench/bench_shared_sandbox.py [--levels 256,2048] [--capacities 256,2048]
                                                   [--baseline 256] [--threads 32] [--steps 20000]

For each capacity C and level N: N leases are opened through a SharedSandboxes registry (ceil(N/C)
processes) and reset, then stepped (a) one at a time, round-robin over all N, and (b) by `--threads`
threads at once, each over its own share of the episodes (lock waits included). Memory is the RSS
(and PSS, which counts shared pages once) of the sandbox processes, summed, divided by N. The
baseline opens `--baseline` ProcessSandboxes, one per episode, and measures the same. The environment
is a trivial counter the bench writes into a temporary folder. Ends by checking nothing is left.
"""

import argparse
import math
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs.sandbox import ProcessSandbox, SandboxLimits, SharedKey, SharedSandboxes  # noqa: E402

COUNTER_ENV = """
from studio_sdk import Environment


class Counter(Environment):
    def reset(self, task, seed):
        self.n = 0
        return {"n": 0}

    def step(self, action):
        self.n += int(action)
        return {"n": self.n}, 1.0, False, False, {}
"""
MANIFEST = 'name = "Counter"\nkind = "python"\nentrypoint = "env:Counter"\nconcurrent_sessions = 2048\n'
LIMITS = SandboxLimits(step_timeout_s=30, episode_timeout_s=3600)
TASK = {"id": "t"}


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def package_files():
    """The package, written to a temporary folder and read back as a version's files would be."""
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as folder:
        root = Path(folder)
        (root / "env.py").write_text(COUNTER_ENV)
        (root / "environment.toml").write_text(MANIFEST)
        (root / "tasks.jsonl").write_text('{"id": "t"}\n')
        return {path.name: path.read_text() for path in sorted(root.iterdir())}


def memory_kb(pids):
    """(RSS, PSS) in kB of these processes, summed, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
    return rss, pss


def step_round_robin(envs, steps):
    """Per-step seconds, one step at a time over every episode in turn."""
    times = []
    for index in range(steps):
        env = envs[index % len(envs)]
        started = time.perf_counter()
        env.step(1)
        times.append(time.perf_counter() - started)
    return times


def step_in_threads(envs, steps, threads):
    """(per-step seconds, wall seconds) with `threads` threads stepping their own share of the
    episodes at once."""
    count = min(threads, len(envs))
    shares = [envs[index::count] for index in range(count)]
    results = [[] for _ in range(count)]
    barrier = threading.Barrier(count + 1)

    def work(index):
        barrier.wait()
        results[index] = step_round_robin(shares[index], max(1, steps // count))

    workers = [threading.Thread(target=work, args=(index,)) for index in range(count)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return [value for result in results for value in result], time.perf_counter() - started


def measure(name, envs, pids, opened_s, steps, threads):
    rss, pss = memory_kb(pids)
    sequential = step_round_robin(envs, steps)
    concurrent, wall_s = step_in_threads(envs, steps, threads)
    return {
        "setup": name,
        "episodes": len(envs),
        "processes": len(pids),
        "open_s": opened_s,
        "rss_mb": rss / 1024,
        "rss_kb_per_episode": rss / len(envs),
        "pss_kb_per_episode": pss / len(envs),
        "p50_ms": percentile(sequential, 0.5) * 1000,
        "p99_ms": percentile(sequential, 0.99) * 1000,
        "threads_p50_ms": percentile(concurrent, 0.5) * 1000,
        "threads_p99_ms": percentile(concurrent, 0.99) * 1000,
        "threads_steps_s": len(concurrent) / wall_s,
    }


def shared_row(files, capacity, episodes, steps, threads):
    registry = SharedSandboxes()
    key = SharedKey(team_id=1, content_hash="bench", label="counter@1")
    try:
        started = time.perf_counter()
        leases = []
        for _ in range(episodes):
            lease = registry.lease(key=key, files=files, entrypoint="env:Counter", limits=LIMITS, capacity=capacity)
            lease.reset(TASK, 0)
            leases.append(lease)
        opened_s = time.perf_counter() - started
        groups = registry.groups()
        assert len(groups) == math.ceil(episodes / capacity), len(groups)
        pids = [group.pid for group in groups]
        row = measure(f"shared, {capacity}/process", leases, pids, opened_s, steps, threads)
        for lease in leases:
            lease.close()
        assert registry.groups() == [], "closing every lease must stop every process"
        return row, pids
    finally:
        registry.close_all()


def baseline_row(files, episodes, steps, threads):
    sandboxes = []
    try:
        started = time.perf_counter()
        for _ in range(episodes):
            sandbox = ProcessSandbox()
            sandboxes.append(sandbox)
            sandbox.start(files, mode="env", entrypoint="env:Counter", limits=LIMITS)
            sandbox.reset(TASK, 0)
        opened_s = time.perf_counter() - started
        pids = [sandbox.pid for sandbox in sandboxes]
        return measure("one ProcessSandbox each", sandboxes, pids, opened_s, steps, threads), pids
    finally:
        for sandbox in sandboxes:
            sandbox.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="256,2048", help="open episodes to measure")
    parser.add_argument("--capacities", default="256,2048", help="concurrent_sessions values to measure")
    parser.add_argument("--baseline", type=int, default=256, help="episodes for one ProcessSandbox each (0: skip)")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    files = package_files()
    levels = [int(value) for value in args.levels.split(",") if value]
    capacities = [int(value) for value in args.capacities.split(",") if value]

    rows, pids = [], []
    for capacity in capacities:
        for level in levels:
            if level < capacity and level != min(levels):
                continue  # the same single process as a smaller level
            row, used = shared_row(files, capacity, level, args.steps, args.threads)
            rows.append(row)
            pids += used
            print(f"... {row['setup']} x{level} done", file=sys.stderr, flush=True)
    if args.baseline:
        row, used = baseline_row(files, args.baseline, args.steps, args.threads)
        rows.append(row)
        pids += used

    header = (
        f"{'setup':<26}{'episodes':>9}{'procs':>7}{'open s':>8}{'RSS MB':>9}{'RSS kB/ep':>11}{'PSS kB/ep':>11}"
        f"{'p50 ms':>8}{'p99 ms':>8}{'thr p50':>9}{'thr p99':>9}{'thr st/s':>10}"
    )
    print(f"trivial counter env; step = one round trip; 'thr' = {args.threads} threads stepping at once")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['setup']:<26}{row['episodes']:>9}{row['processes']:>7}{row['open_s']:>8.1f}{row['rss_mb']:>9.1f}"
            f"{row['rss_kb_per_episode']:>11.1f}{row['pss_kb_per_episode']:>11.1f}{row['p50_ms']:>8.3f}{row['p99_ms']:>8.3f}"
            f"{row['threads_p50_ms']:>9.3f}{row['threads_p99_ms']:>9.3f}{row['threads_steps_s']:>10.0f}"
        )

    left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]  # closed sandboxes are reaped
    print("no sandbox process left" if not left else f"LEFT BEHIND: pids {left}")


if __name__ == "__main__":
    main()
