"""Remote sessions: step round trip client -> API -> sandbox -> back, and how many sessions one server holds.

    .venv/bin/python bench/bench_sessions.py [--steps 1000] [--levels 1,4,16,64,128,256] [--database-url URL]

Serves `studio.asgi:application` with uvicorn on loopback (a subprocess) and drives it through
`studio_client` (httpx, keep-alive), as a training loop would, on a trivial environment.

1. Round trip: one session, `--steps` steps after 50 of warm-up; median and p95 (target: median under 5 ms).
2. Sessions held open at once: for each level N, N sessions are opened and held; then (a) one client
   steps them round-robin (200 steps: the cost of holding many open), and (b) N client threads each step
   their own session at once (20 steps each: the cost of driving them all). The table marks the first
   level whose median is twice level 1's.

It uses its own database (`studio_bench_sessions`, created and migrated if missing).
"""
import argparse
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

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_sessions"
ENV_PY = (
    "class Env:\n"
    "    def reset(self, task, seed):\n        self.t = 0\n        return 0\n\n"
    "    def step(self, action):\n        self.t += 1\n        return self.t, 0.0, False, False, {}\n"
)


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def prepare_database(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            conn.execute(f'create database "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env={**os.environ, "DATABASE_URL": url}, check=True)


def create_fixtures() -> tuple[str, str]:
    """A team, an owner's token, and a version of the trivial env; returns (token, "slug@N")."""
    from django.contrib.auth import get_user_model

    from environments import services as env_services
    from studio import services as studio_services
    from studio.models import Membership, Role, Team

    stamp = str(int(time.time() * 1000))
    team = Team.objects.create(slug=f"bench-{stamp}", name=f"Bench {stamp}")
    user = get_user_model().objects.create_user(username=f"bench-{stamp}", password=None)
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    _, raw = studio_services.token_create(team=team, actor=user, name="bench")
    files = {
        "environment.toml": 'name = "trivial"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 1000000\n'
                            "\n[limits]\nepisode_timeout_s = 3600\n",
        "env.py": ENV_PY,
        "tasks.jsonl": json.dumps({"id": "t1", "difficulty": 1}) + "\n",
    }
    env = env_services.environment_create(team=team, actor=user, name="trivial", slug="trivial", files=files)
    version = env_services.version_commit(environment=env, actor=user, message="bench", files=files)
    return raw, version.label


def start_server(url: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": url, "SESSION_MAX_OPEN": "4096", "SESSION_IDLE_TIMEOUT_S": "600", "DEBUG": os.environ.get("DEBUG", "false"),
           "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key-" + "x" * 40), "ALLOWED_HOSTS": "127.0.0.1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
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


def timed_steps(session, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        session.step(1)
        times.append((time.perf_counter() - started) * 1000.0)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--levels", default="1,4,16,64,128,256")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()

    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would swamp the table
    from studio_client import StudioClient

    token, version = create_fixtures()
    server, port = start_server(args.database_url)
    base = f"http://127.0.0.1:{port}"
    try:
        with StudioClient(base, token) as client:
            session = client.session(version, "t1", seed=0)
            timed_steps(session, 50)
            times = timed_steps(session, args.steps)
            session.close()
        median, p95 = statistics.median(times), percentile(times, 0.95)
        print(f"\nRemote step round trip, {args.steps} steps (client -> API -> sandbox -> back, loopback)")
        print(f"  median {median:.2f} ms   p95 {p95:.2f} ms   max {max(times):.2f} ms   target: median < 5 ms "
              f"{'OK' if median < 5 else 'MISSED'}")

        print("\nSessions held open at once")
        print(f"  {'open':>5} {'start s':>8} {'1 client med':>13} {'p95':>7} {'N clients med':>14} {'p95':>7} {'steps/s':>8}")
        base_one = base_all = None
        for level in [int(x) for x in args.levels.split(",")]:
            clients = [StudioClient(base, token) for _ in range(min(level, 64))]
            started = time.perf_counter()
            sessions = [clients[i % len(clients)].session(version, "t1", seed=i) for i in range(level)]
            start_s = time.perf_counter() - started
            one = []
            for i in range(200):
                t0 = time.perf_counter()
                sessions[i % level].step(1)
                one.append((time.perf_counter() - t0) * 1000.0)
            per_thread: list[list[float]] = [[] for _ in range(level)]

            def drive(position):
                per_thread[position] = timed_steps(sessions[position], 20)

            threads = [threading.Thread(target=drive, args=(i,)) for i in range(level)]
            t0 = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - t0
            together = [t for times_ in per_thread for t in times_]
            one_med, all_med = statistics.median(one), statistics.median(together)
            base_one, base_all = base_one or one_med, base_all or all_med
            marks = ("  <- 1-client median doubled" if one_med >= 2 * base_one else "") + (
                "  <- N-client median doubled" if all_med >= 2 * base_all else "")
            print(f"  {level:>5} {start_s:>8.2f} {one_med:>10.2f} ms {percentile(one, 0.95):>7.2f} "
                  f"{all_med:>11.2f} ms {percentile(together, 0.95):>7.2f} {len(together) / wall:>8.0f}{marks}")
            for s in sessions:
                s.close()
            for c in clients:
                c.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
