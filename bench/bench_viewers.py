"""Many viewers on one web process: a stored rollout's backlog opened by many viewers at once, and many
live viewers of a running run (issue 16's viewer targets).

Serves `studio.asgi:application` with uvicorn on a loopback port (one process), viewers are `websockets`
clients authenticated by an API token, spread over child processes as browsers would be.

    .venv/bin/python bench/bench_viewers.py [--backlog-steps 10000] [--backlog-viewers 200]
                                            [--live-viewers 1000] [--rollouts 10] [--live-steps 200]

1. Backlog: `--backlog-viewers` viewers open `ws/rollouts/<id>/` of a stored, finished rollout of
   `--backlog-steps` steps at the same moment; per viewer the time until its first steps arrive and
   until it has every step and the final status; the server's CPU seconds for all of it; its memory
   before, at the end and once the viewers have left. Targets (200 viewers, 10k steps): first steps
   under 0.5 s (median and p95), server CPU under 3 s in total.
2. Live: `--live-viewers` viewers of one run (`ws/runs/<id>/?batch=1`, as the run page asks) of
   `--rollouts` rollouts that publish `--live-steps` steps each in the engine's batches; every step
   delivered once to every viewer, worst lag (publish to a viewer's receipt) under 1 s. The viewers'
   own processes share the machine's cores with the server: their decoding is part of the lag.
Each figure is printed beside the same measure for one viewer (the ratio base), measured in the same run.
The viewers' processes share the machine with the server (and, on a shared development box, with
everything else running there): the server's CPU seconds are the figure that does not depend on it;
the latencies include the viewers' own handshakes and decoding.

Its own database (`studio_bench_viewers`, created and migrated if missing); ids from 10^9 up, so its
channel groups do not meet those of a dev server on the same Redis.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_streaming import cpu_seconds, create_fixtures, in_thread, open_viewer, play_rollout, start_server  # noqa: E402
from bench_support import percentile, prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_viewers"
STEP_MARK = '{"index": '  # every step of a steps message starts so (runs.events.STEP_FIELDS)
STEP_MARK_BYTES = STEP_MARK.encode()


def stored_rollout(run, steps: int):
    """A finished rollout of `steps` stored steps (bulk insert), in the bench run's team."""
    from runs.models import Rollout, RolloutStatus, Step

    rollout = Rollout.objects.create(team_id=run.team_id, run=run, task_id="t0", seed=10**6, status=RolloutStatus.SUCCEEDED,
                                     step_count=steps, total_reward=steps * 0.01, verifier_reward=1.0, verifier_reason="bench",
                                     initial_observation={"pos": 0})
    Step.objects.bulk_create(
        [Step(rollout=rollout, index=i, action=i % 4, observation={"pos": i, "text": f"step {i}", "row": [i % 3] * 8},
              reward=0.01, terminated=i == steps - 1, truncated=False, info={"i": i}, elapsed_ms=0.2) for i in range(steps)],
        batch_size=5000,
    )
    return rollout


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def follow_backlog(url: str, port: int, viewers: int, steps: int, first: int) -> list[dict]:
    """`viewers` viewers connect at once; each reads until the final status. Every 10th viewer (by
    global number) decodes every frame and checks the order; the others count steps by their mark, so
    that the viewers' decoding (2 MB of JSON each) does not eat the cores the server needs."""
    async def one(sampled: bool) -> dict:
        began = time.perf_counter()
        ws = await open_viewer(url, port)
        open_s = time.perf_counter() - began
        first_s, count, last, in_order = None, 0, -1, True
        while True:
            # Unsampled viewers take frames as bytes: no UTF-8 decoding of 2 MB each on the shared cores.
            raw = await asyncio.wait_for(ws.recv(decode=False), 120)
            if raw.startswith(b'{"type": "steps"'):
                if first_s is None:
                    first_s = time.perf_counter() - began
                if sampled:
                    for step in json.loads(raw)["steps"]:
                        in_order &= step["index"] == last + 1
                        last = step["index"]
                        count += 1
                else:
                    count += raw.count(STEP_MARK_BYTES)
            elif raw.startswith(b'{"type": "status"'):
                done = time.perf_counter() - began
                break
        await ws.close()
        return {"open_s": open_s, "first_s": first_s, "all_s": done, "steps": count, "complete": in_order and count == steps}

    return await asyncio.gather(*(one((first + i) % 10 == 0) for i in range(viewers)))


def backlog_child_main(url: str, port: int, viewers: int, steps: int, first: int) -> None:
    """Child mode: READY once loaded, wait for GO on stdin, then print one JSON line of results."""
    print("READY", flush=True)
    sys.stdin.readline()
    cpu = time.process_time()
    results = asyncio.run(follow_backlog(url, port, viewers, steps, first))
    for result in results:
        result["child_cpu_s"] = (time.process_time() - cpu) / len(results)
    print(json.dumps(results), flush=True)


def bench_backlog(port: int, server_pid: int, token: str, rollout, viewers: int, processes: int) -> dict:
    url = f"ws://127.0.0.1:{port}/ws/rollouts/{rollout.pk}/?token={token}"
    shares = [viewers // processes + (1 if i < viewers % processes else 0) for i in range(processes)]
    children = [
        subprocess.Popen([sys.executable, __file__, "--backlog-child", url, str(port), str(share), str(rollout.step_count),
                          str(sum(shares[:i]))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for i, share in enumerate(shares) if share
    ]
    for child in children:
        assert child.stdout.readline().strip() == "READY"
    rss_before, cpu_before = rss_mb(server_pid), cpu_seconds(server_pid)
    for child in children:
        child.stdin.write("GO\n")
        child.stdin.flush()
    results = [r for child in children for r in json.loads(child.stdout.readline())]
    server_cpu_s = cpu_seconds(server_pid) - cpu_before
    rss_peak = rss_mb(server_pid)
    for child in children:
        child.wait(30)
    time.sleep(3)  # the server lets go of what the viewers held
    firsts = [r["first_s"] for r in results]
    alls = [r["all_s"] for r in results]
    return {
        "viewers": len(results),
        "complete": sum(1 for r in results if r["complete"]),
        "open_median_s": statistics.median(r["open_s"] for r in results),
        "first_median_s": statistics.median(firsts),
        "first_p95_s": percentile(firsts, 0.95),
        "all_median_s": statistics.median(alls),
        "all_max_s": max(alls),
        "server_cpu_s": server_cpu_s,
        "viewers_cpu_s": sum(r["child_cpu_s"] for r in results),
        "rss_before_mb": rss_before,
        "rss_end_mb": rss_peak,
        "rss_after_mb": rss_mb(server_pid),
    }


async def follow_run(url: str, port: int, viewers: int, first: int, ready) -> list[dict]:
    """`viewers` viewers of one run (as the run page: `batch=1`) until its summary says every rollout is
    done and 1 s passes without news (or 20 s of silence). Every 10th viewer (by global number) decodes
    every frame and measures each step's lag; the others count steps by their mark and note when the
    last one came, so that the viewers' own decoding (200 MB of JSON for 1,000 viewers) does not eat
    the cores the server needs."""
    sockets = await asyncio.gather(*(open_viewer(url, port) for _ in range(viewers)))
    for ws in sockets:
        assert json.loads(await ws.recv())["type"] == "run"
    ready()

    async def follow(ws, sampled: bool) -> dict:
        got, steps, lag, last_step_at, over, timeout = {}, 0, 0.0, 0.0, False, 20
        while True:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout)
            except TimeoutError:
                break
            now = time.time()
            if STEP_MARK in raw:
                last_step_at = now
            if not sampled:
                steps += raw.count(STEP_MARK)
                if '"pending": 0' in raw:
                    over, timeout = True, 1
                continue
            frame = json.loads(raw)
            for message in frame["messages"] if frame["type"] == "batch" else [frame]:
                if message["type"] == "steps":
                    for step in message["steps"]:
                        key = f"{message['rollout_id']}:{step['index']}"
                        got[key] = got.get(key, 0) + 1
                        lag = max(lag, now - step["info"]["sent_at"])
                elif message["type"] == "run" and not message["summary"]["pending"]:
                    over, timeout = True, 1  # drain what is still on its way
        await ws.close()
        if sampled:
            steps = sum(got.values())
        return {"sampled": sampled, "distinct": len(got) if sampled else steps, "steps": steps, "lag": lag,
                "last_step_at": last_step_at, "final_summary": over}

    return await asyncio.gather(*(follow(ws, (first + i) % 10 == 0) for i, ws in enumerate(sockets)))


def live_child_main(url: str, port: int, viewers: int, first: int) -> None:
    """Child mode: READY once connected, then one JSON line of results (with its CPU while following)."""
    cpu = []
    results = asyncio.run(follow_run(url, port, viewers, first, lambda: (cpu.append(time.process_time()), print("READY", flush=True))))
    for result in results:
        result["child_cpu_s"] = (time.process_time() - cpu[0]) / len(results)
    print(json.dumps(results), flush=True)


def bench_live(port: int, server_pid: int, token: str, run, rollouts, viewers: int, steps_each: int, processes: int) -> dict:
    """Rollouts publish in the engine's batches (bench_streaming's play_rollout) while the viewers,
    spread over child processes, follow the run."""
    url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/?token={token}&batch=1"
    began = time.perf_counter()
    shares = [viewers // processes + (1 if i < viewers % processes else 0) for i in range(processes)]
    children = [subprocess.Popen([sys.executable, __file__, "--live-child", url, str(port), str(share), str(sum(shares[:i]))],
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT) for i, share in enumerate(shares) if share]
    for child in children:
        assert child.stdout.readline().strip() == "READY"
    connect_s = time.perf_counter() - began

    last_publish: list[float] = []  # when each rollout's last batch went out (or just before)
    cpu_before = cpu_seconds(server_pid)
    for thread in [in_thread(play_rollout, rollout, steps_each, last_publish) for rollout in rollouts]:
        thread.join()
    results = [r for child in children for r in json.loads(child.stdout.readline())]
    server_cpu_s = cpu_seconds(server_pid) - cpu_before
    for child in children:
        child.wait(30)
    expected = steps_each * len(rollouts)
    sampled = [r for r in results if r["sampled"]]
    return {
        "viewers": len(results),
        "steps_per_viewer": expected,
        "deliveries": sum(r["steps"] for r in results),
        "complete_viewers": sum(1 for r in results if r["steps"] == r["distinct"] == expected),
        "sampled": len(sampled),
        "max_lag_ms": max(r["lag"] for r in sampled) * 1000,
        "p95_viewer_max_lag_ms": percentile([r["lag"] for r in sampled], 0.95) * 1000,
        "last_step_lag_ms": max(r["last_step_at"] - max(last_publish) for r in results) * 1000,
        "final_summary": sum(1 for r in results if r["final_summary"]),
        "connect_all_s": connect_s,
        "server_cpu_s": server_cpu_s,
        "viewers_cpu_s": sum(r["child_cpu_s"] for r in results),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog-steps", type=int, default=10_000)
    parser.add_argument("--backlog-viewers", type=int, default=200)
    parser.add_argument("--live-viewers", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--live-steps", type=int, default=200, help="steps each live rollout publishes")
    parser.add_argument("--viewer-processes", type=int, default=4, help="child processes the viewers are spread over")
    parser.add_argument("--only", choices=("backlog", "live"), help="measure one part only")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()

    # The server as deployed: DEBUG off (no query log growing with every step read), plain HTTP on loopback.
    os.environ.update({"DEBUG": "false", "SECURE_SSL_REDIRECT": "false", "LOG_LEVEL": "WARNING",
                       "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)})
    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    token, _, run, rollouts = create_fixtures(args.rollouts)
    backlog_rollout = stored_rollout(run, args.backlog_steps)
    solo_token, _, solo_run, solo_rollouts = create_fixtures(args.rollouts)
    # As scripts/run_studio.sh serves it: a pool of database connections, no per-message deflate (a
    # compressor per viewer and message).
    os.environ.setdefault("DB_POOL_MAX_SIZE", "10")
    server, port = start_server(args.database_url, ["--ws-per-message-deflate", "false"])
    try:
        if args.only != "live":
            backlog_one = bench_backlog(port, server.pid, token, backlog_rollout, 1, 1)
            backlog_many = bench_backlog(port, server.pid, token, backlog_rollout, args.backlog_viewers, args.viewer_processes)
        if args.only != "backlog":
            live_one = bench_live(port, server.pid, solo_token, solo_run, solo_rollouts, 1, args.live_steps, 1)
            live_many = bench_live(port, server.pid, token, run, rollouts, args.live_viewers, args.live_steps, args.viewer_processes)
    finally:
        server.terminate()
        server.wait(10)

    def ratio(many, one):
        return f"{many / one:.1f}x" if one > 0 else "-"

    rows = []
    if args.only != "live":
        rows += backlog_rows(args, backlog_one, backlog_many, ratio)
    if args.only != "backlog":
        rows += live_rows(args, live_one, live_many, ratio)
    headers = ("measure", "1 viewer", "many", "ratio", "target")
    widths = [max(len(str(r[i])) for r in [*rows, headers]) for i in range(5)]
    line = lambda cells: "  ".join(f"{c:<{w}}" if i in (0, 4) else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def backlog_rows(args, b1, bn, ratio):
    return [
        (f"backlog {args.backlog_steps:,} steps: viewers", "1", f"{bn['viewers']}", "", ""),
        ("backlog: viewers with every step (in order: every 10th checked)", f"{b1['complete']}/1", f"{bn['complete']}/{bn['viewers']}", "", "all"),
        ("backlog: handshake done, median", f"{b1['open_median_s'] * 1000:.0f} ms", f"{bn['open_median_s'] * 1000:.0f} ms",
         ratio(bn["open_median_s"], b1["open_median_s"]), ""),
        ("backlog: first steps, median", f"{b1['first_median_s'] * 1000:.0f} ms", f"{bn['first_median_s'] * 1000:.0f} ms",
         ratio(bn["first_median_s"], b1["first_median_s"]), "< 500 ms " + ("ok" if bn["first_median_s"] < 0.5 else "MISSED")),
        ("backlog: first steps, p95", f"{b1['first_p95_s'] * 1000:.0f} ms", f"{bn['first_p95_s'] * 1000:.0f} ms",
         ratio(bn["first_p95_s"], b1["first_p95_s"]), "< 500 ms " + ("ok" if bn["first_p95_s"] < 0.5 else "MISSED")),
        ("backlog: every step + status, median", f"{b1['all_median_s'] * 1000:.0f} ms", f"{bn['all_median_s'] * 1000:.0f} ms",
         ratio(bn["all_median_s"], b1["all_median_s"]), ""),
        ("backlog: every step + status, slowest viewer", f"{b1['all_max_s'] * 1000:.0f} ms", f"{bn['all_max_s'] * 1000:.0f} ms",
         ratio(bn["all_max_s"], b1["all_max_s"]), ""),
        ("backlog: server CPU", f"{b1['server_cpu_s']:.2f} s", f"{bn['server_cpu_s']:.2f} s",
         ratio(bn["server_cpu_s"], b1["server_cpu_s"]), "< 3 s " + ("ok" if bn["server_cpu_s"] < 3 else "MISSED")),
        ("backlog: the viewers' own processes' CPU meanwhile", f"{b1['viewers_cpu_s']:.2f} s", f"{bn['viewers_cpu_s']:.2f} s",
         ratio(bn["viewers_cpu_s"], b1["viewers_cpu_s"]), "(same 2 cores)"),
        ("backlog: server RSS before / end / viewers gone", "", f"{bn['rss_before_mb']:.0f} / {bn['rss_end_mb']:.0f} / {bn['rss_after_mb']:.0f} MB", "", ""),
    ]


def live_rows(args, l1, ln, ratio):
    return [
        (f"live {args.rollouts} rollouts x {args.live_steps} steps: viewers", "1", f"{ln['viewers']}", "", ""),
        ("live: step deliveries (all viewers)", f"{l1['deliveries']}/{l1['viewers'] * l1['steps_per_viewer']}",
         f"{ln['deliveries']}/{ln['viewers'] * ln['steps_per_viewer']}", "", "all"),
        ("live: viewers with every step once", f"{l1['complete_viewers']}/{l1['viewers']}",
         f"{ln['complete_viewers']}/{ln['viewers']}", "", "all " + ("ok" if ln["complete_viewers"] == ln["viewers"] else "MISSED")),
        ("live: last step at every viewer, after its publish", f"{l1['last_step_lag_ms']:.0f} ms", f"{ln['last_step_lag_ms']:.0f} ms",
         ratio(ln["last_step_lag_ms"], l1["last_step_lag_ms"]), "< 1000 ms " + ("ok" if ln["last_step_lag_ms"] < 1000 else "MISSED")),
        (f"live: worst lag of any step ({ln['sampled']} sampled viewers)", f"{l1['max_lag_ms']:.0f} ms", f"{ln['max_lag_ms']:.0f} ms",
         ratio(ln["max_lag_ms"], l1["max_lag_ms"]), "< 1000 ms " + ("ok" if ln["max_lag_ms"] < 1000 else "MISSED")),
        ("live: p95 of each viewer's worst lag", f"{l1['p95_viewer_max_lag_ms']:.0f} ms", f"{ln['p95_viewer_max_lag_ms']:.0f} ms",
         ratio(ln["p95_viewer_max_lag_ms"], l1["p95_viewer_max_lag_ms"]), ""),
        ("live: server CPU while publishing", f"{l1['server_cpu_s']:.2f} s", f"{ln['server_cpu_s']:.2f} s",
         ratio(ln["server_cpu_s"], l1["server_cpu_s"]), ""),
        ("live: the viewers' own processes' CPU meanwhile", f"{l1['viewers_cpu_s']:.2f} s", f"{ln['viewers_cpu_s']:.2f} s",
         ratio(ln["viewers_cpu_s"], l1["viewers_cpu_s"]), "(same 2 cores)"),
        ("live: viewers given the final summary", f"{l1['final_summary']}/{l1['viewers']}", f"{ln['final_summary']}/{ln['viewers']}", "", ""),
        ("live: connect all viewers", f"{l1['connect_all_s']:.2f} s", f"{ln['connect_all_s']:.2f} s", "", ""),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--backlog-child":
        backlog_child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--live-child":
        live_child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
