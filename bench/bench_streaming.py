"""Streaming speed: publish→receive latency of steps over a websocket, and fan-out to many viewers.

Serves `studio.asgi:application` with uvicorn on a loopback port (a subprocess), publishes steps
through `runs.events` exactly as the worker does (store the batch, then publish), and follows them
with `websockets` clients authenticated by an API token.

    .venv/bin/python bench/bench_streaming.py [--steps 1000] [--viewers 100] [--rollouts 10]
                                              [--fanout-steps 200] [--database-url URL]

1. Latency: one viewer of one rollout; `--steps` steps published one at a time, 2 ms apart, each with
   its publish time in `info`; median and p95 of publish → arrival (target: p95 under 50 ms).
2. Fan-out: `--viewers` viewers of one run of `--rollouts` rollouts; every rollout publishes
   `--fanout-steps` steps, one every 5 ms, in the engine's batches (runs.episodes.engine's flush rule); counts every
   (rollout, index) each viewer gets (all, exactly once) and the worst lag of any step at any viewer
   (target: under 1 s).

It uses its own database (`studio_bench_streaming`, created and migrated if missing) and starts its
ids at 10^9 so that its channel groups do not meet those of a dev server or test run on the same Redis.
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_support import percentile, prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_streaming"
ENV_PY = "class Env:\n    def reset(self, task, seed):\n        return 0\n\n    def step(self, action):\n        return 0, 0.0, False, False, {}\n"


def create_fixtures(rollouts: int):
    """A team, an owner with a token, and a run of `rollouts` rollouts; ids from 10^9 up."""
    from django.db import connection

    from environments import services as env_services
    from runs import services
    from studio import services as studio_services
    from studio.models import Membership, Role, Team
    from django.contrib.auth import get_user_model

    with connection.cursor() as cursor:
        for table in ("runs_run", "runs_rollout"):
            cursor.execute(f"select setval(pg_get_serial_sequence('{table}', 'id'), greatest(1000000000, (select coalesce(max(id), 0) from {table})))")
    stamp = str(int(time.time() * 1000))
    team = Team.objects.create(slug=f"bench-{stamp}", name=f"Bench {stamp}")
    user = get_user_model().objects.create_user(username=f"bench-{stamp}", password=None)
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    _, raw = studio_services.token_create(team=team, actor=user, name="bench")
    files = {
        "environment.toml": 'name = "bench"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 100000\n',
        "env.py": ENV_PY,
        "tasks.jsonl": "".join(json.dumps({"id": f"t{i}", "difficulty": 1}) + "\n" for i in range(rollouts)),
    }
    env = env_services.environment_create(team=team, actor=user, name="bench", slug="bench", files=files)
    version = env_services.version_commit(environment=env, actor=user, message="bench", files=files)
    agent = services.agent_get_or_create(team=team, actor=user, name="random", kind="random")
    latency_run = services.run_create(team=team, actor=user, version=version, agent=agent, task_ids=["t0"], enqueue=False)
    fanout_run = services.run_create(team=team, actor=user, version=version, agent=agent, enqueue=False)
    return raw, latency_run.rollouts.get(), fanout_run, list(fanout_run.rollouts.order_by("id"))


def start_server(url: str, extra_args: list[str]) -> tuple[subprocess.Popen, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": url}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--ws-max-size", str(64 * 1024 * 1024), *extra_args],
        cwd=ROOT, env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, port
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("uvicorn did not start")


class StepWriter:
    """The engine's flush in miniature: store a batch, update the count, then publish."""

    def __init__(self, rollout):
        self.rollout, self.pending, self.count, self.last_flush = rollout, [], 0, time.monotonic()

    def add(self, index: int) -> None:
        self.pending.append({
            "index": index, "action": 0, "observation": {"t": index}, "reward": 0.0, "terminated": False,
            "truncated": False, "info": {}, "elapsed_ms": 0.1,
        })

    def due(self) -> bool:
        from runs.episodes import FLUSH_EVERY_S, FLUSH_EVERY_STEPS

        return len(self.pending) >= FLUSH_EVERY_STEPS or time.monotonic() - self.last_flush >= FLUSH_EVERY_S

    def flush(self) -> None:
        from runs import events
        from runs.models import Rollout, RolloutStatus, Step

        self.last_flush = time.monotonic()
        if not self.pending:
            return
        steps, self.pending = self.pending, []
        Step.objects.bulk_create([Step(rollout_id=self.rollout.pk, **s) for s in steps])
        self.count += len(steps)
        Rollout.objects.filter(pk=self.rollout.pk).update(step_count=self.count, status=RolloutStatus.RUNNING)
        sent_at = time.time()
        for step in steps:
            step["info"] = {"sent_at": sent_at}
        events.publish_steps(self.rollout, steps)


def play_rollout(rollout, steps: int, last_batch_at: list | None = None) -> None:
    """Publish `steps` steps in the engine's batches, one step every 5 ms, then finish the rollout;
    `last_batch_at` (when given) gets the moment just before its last batch goes out."""
    from runs import events
    from runs.models import Rollout, RolloutStatus

    writer = StepWriter(rollout)
    for index in range(steps):
        writer.add(index)
        if writer.due():
            writer.flush()
        time.sleep(0.005)
    if last_batch_at is not None:
        last_batch_at.append(time.time())
    writer.flush()
    Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.SUCCEEDED)
    events.publish_rollout(Rollout.objects.get(pk=rollout.pk))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_thread(fn, *args) -> threading.Thread:
    def body():
        from django.db import connection

        try:
            fn(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


async def open_viewer(url: str, port: int):
    from websockets.asyncio.client import connect

    # The site's origin, as a browser on the page would send; ws_auth.ProgramOriginValidator would let
    # a program leave it out.
    return await connect(url, origin=f"http://127.0.0.1:{port}", max_size=None, open_timeout=60)


async def bench_latency(port: int, token: str, rollout, steps: int) -> dict:
    viewer = await open_viewer(f"ws://127.0.0.1:{port}/ws/rollouts/{rollout.pk}/?token={token}", port)
    first = json.loads(await viewer.recv())
    assert first["type"] == "status", first
    latencies: list[float] = []

    def publish():
        writer = StepWriter(rollout)
        for index in range(steps):
            writer.add(index)
            writer.flush()
            time.sleep(0.002)

    thread = in_thread(publish)
    received = []
    while len(received) < steps:
        message = json.loads(await asyncio.wait_for(viewer.recv(), 30))
        now = time.time()
        for step in message.get("steps", []):
            received.append(step["index"])
            latencies.append((now - step["info"]["sent_at"]) * 1000)
    thread.join()
    await viewer.close()
    return {
        "steps": steps,
        "in_order_once": received == list(range(steps)),
        "median_ms": statistics.median(latencies),
        "p95_ms": percentile(latencies, 0.95),
        "max_ms": max(latencies),
    }


async def follow_run(url: str, port: int, viewers: int, rollouts: int, ready) -> list[dict]:
    """`viewers` viewers of one run until its summary says every rollout is done (or 10 s of silence)."""
    sockets = await asyncio.gather(*(open_viewer(url, port) for _ in range(viewers)))
    for ws in sockets:
        assert json.loads(await ws.recv())["type"] == "run"
    ready()

    async def follow(ws) -> dict:
        got, lag, summaries = {}, 0.0, 0
        while True:
            try:
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
            except TimeoutError:
                break
            now = time.time()
            if message["type"] == "steps":
                for step in message["steps"]:
                    key = f"{message['rollout_id']}:{step['index']}"
                    got[key] = got.get(key, 0) + 1
                    lag = max(lag, now - step["info"]["sent_at"])
            elif message["type"] == "run":
                summaries += 1
                # The throttled summary can be read while steps are still on their way: drain them.
                if not message["summary"]["pending"]:
                    try:
                        while True:
                            extra = json.loads(await asyncio.wait_for(ws.recv(), 1))
                            now = time.time()
                            for step in extra.get("steps", []):
                                key = f"{extra['rollout_id']}:{step['index']}"
                                got[key] = got.get(key, 0) + 1
                                lag = max(lag, now - step["info"]["sent_at"])
                    except TimeoutError:
                        break
        await ws.close()
        return {"got": got, "lag": lag, "summaries": summaries}

    return await asyncio.gather(*(follow(ws) for ws in sockets))


def viewer_process_main(url: str, port: int, viewers: int, rollouts: int) -> None:
    """Child mode: print READY once connected, then one JSON line of results."""
    results = asyncio.run(follow_run(url, port, viewers, rollouts, lambda: print("READY", flush=True)))
    print(json.dumps(results), flush=True)


def bench_fanout(port: int, server_pid: int, token: str, run, rollouts, viewers: int, steps_each: int, processes: int) -> dict:
    """Viewers live in `processes` child processes, as browsers would be: none of them shares the
    publisher's interpreter (one Python process with 100 sockets and 10 writer threads measures its
    own GIL more than the server)."""
    url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/?token={token}"
    began = time.perf_counter()
    shares = [viewers // processes + (1 if i < viewers % processes else 0) for i in range(processes)]
    children = [
        subprocess.Popen([sys.executable, __file__, "--viewer-child", url, str(port), str(share), str(len(rollouts))],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for share in shares if share
    ]
    for child in children:
        assert child.stdout.readline().strip() == "READY"
    connect_s = time.perf_counter() - began

    started, cpu_before = time.perf_counter(), cpu_seconds(server_pid)
    for thread in [in_thread(play_rollout, rollout, steps_each) for rollout in rollouts]:
        thread.join()
    publish_s = time.perf_counter() - started
    results = [r for child in children for r in json.loads(child.stdout.readline())]
    server_cpu_s = cpu_seconds(server_pid) - cpu_before
    delivered_s = time.perf_counter() - started
    for child in children:
        child.wait(30)

    expected = steps_each * len(rollouts)
    lags = [r["lag"] for r in results]
    return {
        "viewers": len(results),
        "rollouts": len(rollouts),
        "steps_per_viewer": expected,
        "deliveries": sum(sum(r["got"].values()) for r in results),
        "complete_viewers": sum(1 for r in results if len(r["got"]) == expected and all(n == 1 for n in r["got"].values())),
        "duplicates": sum(n - 1 for r in results for n in r["got"].values() if n > 1),
        "max_lag_ms": max(lags) * 1000,
        "p95_viewer_max_lag_ms": percentile(lags, 0.95) * 1000,
        "viewers_with_final_summary": sum(1 for r in results if r["summaries"]),
        "connect_all_s": connect_s,
        "publish_s": publish_s,
        "server_cpu_s": server_cpu_s,
        "delivered_s": delivered_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--viewers", type=int, default=100)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--fanout-steps", type=int, default=200, help="steps each rollout publishes in the fan-out")
    parser.add_argument("--viewer-processes", type=int, default=4, help="child processes the viewers are spread over")
    parser.add_argument("--no-deflate", action="store_true", help="serve without permessage-deflate (uvicorn --ws-per-message-deflate false)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()

    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    token, latency_rollout, run, rollouts = create_fixtures(args.rollouts)
    server, port = start_server(args.database_url, ["--ws-per-message-deflate", "false"] if args.no_deflate else [])
    try:
        latency = asyncio.run(bench_latency(port, token, latency_rollout, args.steps))
        fanout = bench_fanout(port, server.pid, token, run, rollouts, args.viewers, args.fanout_steps, args.viewer_processes)
    finally:
        server.terminate()
        server.wait(10)

    rows = [
        ("latency: steps", f"{latency['steps']}", ""),
        ("latency: every step once, in order", "yes" if latency["in_order_once"] else "NO", ""),
        ("latency: publish → websocket, median", f"{latency['median_ms']:.2f} ms", ""),
        ("latency: publish → websocket, p95", f"{latency['p95_ms']:.2f} ms", "< 50 ms " + ("ok" if latency["p95_ms"] < 50 else "MISSED")),
        ("latency: publish → websocket, max", f"{latency['max_ms']:.2f} ms", ""),
        ("fan-out: viewers × rollouts", f"{fanout['viewers']} × {fanout['rollouts']}", ""),
        ("fan-out: steps per viewer", f"{fanout['steps_per_viewer']}", ""),
        ("fan-out: step deliveries", f"{fanout['deliveries']}", f"of {fanout['viewers'] * fanout['steps_per_viewer']}"),
        ("fan-out: viewers with all steps once", f"{fanout['complete_viewers']}/{fanout['viewers']}", ""),
        ("fan-out: duplicates", f"{fanout['duplicates']}", ""),
        ("fan-out: worst lag of any step", f"{fanout['max_lag_ms']:.1f} ms", "< 1000 ms " + ("ok" if fanout["max_lag_ms"] < 1000 else "MISSED")),
        ("fan-out: p95 of each viewer's worst lag", f"{fanout['p95_viewer_max_lag_ms']:.1f} ms", ""),
        ("fan-out: viewers given the final summary", f"{fanout['viewers_with_final_summary']}/{fanout['viewers']}", ""),
        ("fan-out: connect all viewers", f"{fanout['connect_all_s']:.2f} s", ""),
        ("fan-out: publishing took", f"{fanout['publish_s']:.2f} s", ""),
        ("fan-out: until the last viewer finished", f"{fanout['delivered_s']:.2f} s", "(includes 1 s drain wait)"),
        ("fan-out: server CPU in that time", f"{fanout['server_cpu_s']:.2f} s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>{value_width}}  target")
    print(f"{'-' * width}  {'-' * value_width}  {'-' * 14}")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>{value_width}}  {target}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--viewer-child":
        viewer_process_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
