"""Interactive episodes through episode hosts: round trip, open episodes, concurrent and batched stepping.

    .venv/bin/python bench/bench_episodes.py [--steps 1000] [--levels 1,64,256] [--clients 64] [--web 2]
                                             [--shared-levels 256,2048] [--database-url URL]

Starts `--web` uvicorn processes and one episode host (`manage.py episode_host`) on loopback against
its own database (`studio_bench_episodes`, created and migrated if missing), and drives them over HTTP
with httpx (keep-alive, one client per thread) on a trivial environment, as a training loop would:

1. Round trip: one session, `--steps` steps after 50 of warm-up (target: median under 2 ms).
2. Open episodes: for each level N, N sessions held open at once (one sandbox each); memory per open
   episode (RSS of the host and its sandboxes, summed, over N) and step p50/p99 with 64 client
   threads stepping them round-robin. With `--shared-levels`, the same for a version that declares
   `concurrent_sessions` (many episodes per sandbox process).
3. Aggregate steps/s with `--clients` concurrent clients, each stepping its own session
   (target >= 5,000), and with one client batching steps of 64 sessions per request (target >= 20,000).
The bare sandbox loop (ProcessSandbox.step in this process) is measured in the same run as the ratio.
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

from bench_support import percentile, prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_episodes"
ENV_PY = (
    "class Env:\n"
    "    def reset(self, task, seed):\n        self.t = 0\n        return 0\n\n"
    "    def step(self, action):\n        self.t += 1\n        return self.t, 0.0, False, False, {}\n"
)


def create_fixtures(shared: int) -> tuple[str, str, str | None]:
    """A team, an owner's token, a version of the trivial env (and one declaring concurrent_sessions)."""
    from django.contrib.auth import get_user_model

    from environments import services as env_services
    from studio import services as studio_services
    from studio.models import Membership, Role, Team

    stamp = str(int(time.time() * 1000))
    team = Team.objects.create(slug=f"bench-{stamp}", name=f"Bench {stamp}")
    user = get_user_model().objects.create_user(username=f"bench-{stamp}", password=None)
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    _, raw = studio_services.token_create(team=team, actor=user, name="bench")
    labels = []
    for slug, extra in (("trivial", ""), ("trivial-shared", f"concurrent_sessions = {shared}\n")):
        if extra and not shared:
            labels.append(None)
            continue
        files = {
            "environment.toml": f'name = "{slug}"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 100000\n{extra}'
                                "\n[limits]\nepisode_timeout_s = 3600\n",
            "env.py": ENV_PY,
            "tasks.jsonl": json.dumps({"id": "t1", "difficulty": 1}) + "\n",
        }
        env = env_services.environment_create(team=team, actor=user, name=slug, slug=slug, files=files)
        labels.append(env_services.version_commit(environment=env, actor=user, message="bench", files=files).label)
    return raw, labels[0], labels[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(url: str, prefix: str) -> dict:
    return {**os.environ, "DATABASE_URL": url, "EPISODES_MAX_OPEN_PER_TEAM": "100000", "SESSION_IDLE_TIMEOUT_S": "600",
            "DEBUG": "false", "SECURE_SSL_REDIRECT": "false", "LOG_LEVEL": "WARNING", "EPISODE_HOST_PREFIX": prefix, "DB_POOL_MAX_SIZE": "8",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key-" + "x" * 40), "ALLOWED_HOSTS": "127.0.0.1"}


def start_web(url: str, prefix: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "studio.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=server_env(url, prefix),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("uvicorn did not start")


def start_host(url: str, prefix: str, threads: int = 64) -> subprocess.Popen:
    import redis
    from django.conf import settings

    proc = subprocess.Popen([sys.executable, "manage.py", "episode_host", "--threads", str(threads)], cwd=ROOT,
                            env=server_env(url, prefix), stdout=subprocess.DEVNULL)
    client = redis.Redis.from_url(settings.EPISODE_HOST_REDIS_URL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if client.zrange(f"{prefix}:eh:hosts", 0, -1):
            return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the episode host did not start")


def tree_rss_mb(pid: int) -> float:
    """RSS of a process and all its descendants (its sandboxes), in MB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm") as statm:
                total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
        todo.extend(children.get(current, []))
    return total / (1024 * 1024)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        fields = stats.get(current)
        if fields:
            total += (int(fields[11]) + int(fields[12])) / ticks
        todo.extend(children.get(current, []))
    return total


class Api:
    def __init__(self, base: str, token: str):
        import httpx

        self.http = httpx.Client(base_url=base + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120)

    def open(self, version: str, seed: int) -> str:
        response = self.http.post("/sessions", json={"version": version, "task_id": "t1", "seed": seed})
        response.raise_for_status()
        return response.json()["session_id"]

    def step(self, sid: str, action=1) -> dict:
        response = self.http.post(f"/sessions/{sid}/step", json={"action": action})
        response.raise_for_status()
        return response.json()

    def steps(self, sids: list[str]) -> list[dict]:
        response = self.http.post("/sessions/step", json={"steps": [{"session_id": s, "action": 1} for s in sids]})
        if response.status_code != 200:
            raise SystemExit(f"batch step answered {response.status_code}: {response.text[:500]}")
        return response.json()["results"]

    def close_session(self, sid: str) -> None:
        self.http.post(f"/sessions/{sid}/close")

    def close(self):
        self.http.close()


def in_threads(count: int, work) -> float:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def bare_sandbox_steps_per_s(steps: int = 5000) -> float:
    from runs.sandbox import ProcessSandbox

    with ProcessSandbox() as sandbox:
        sandbox.start({"env.py": ENV_PY}, mode="env", entrypoint="env:Env", limits={"episode_timeout_s": 3600})
        sandbox.reset({"id": "t1"}, 0)
        started = time.perf_counter()
        for _ in range(steps):
            sandbox.step(1)
        return steps / (time.perf_counter() - started)


def open_many(apis: list[Api], version: str, count: int) -> list[str]:
    sids: list[str | None] = [None] * count
    errors: list[str] = []

    def work(i):
        for position in range(i, count, len(apis)):
            try:
                sids[position] = apis[i].open(version, position)
            except Exception as exc:  # noqa: BLE001 - reported below, with the server's answer
                errors.append(getattr(getattr(exc, "response", None), "text", "") or repr(exc))
                return

    in_threads(len(apis), work)
    if errors:
        raise SystemExit(f"{len(errors)} sessions could not be opened; first: {errors[0][:500]}")
    return sids


def level_row(apis, hosts, version, level, label) -> dict:
    before = sum(tree_rss_mb(host.pid) for host in hosts)
    started = time.perf_counter()
    sids = open_many(apis, version, level)
    open_s = time.perf_counter() - started
    time.sleep(1.0)
    after = sum(tree_rss_mb(host.pid) for host in hosts)
    latencies: list[list[float]] = [[] for _ in apis]

    def work(i):
        mine = sids[i::len(apis)]
        for round_ in range(max(1, 640 // len(apis))):
            sid = mine[round_ % len(mine)] if mine else None
            if sid is None:
                return
            t0 = time.perf_counter()
            apis[i].step(sid)
            latencies[i].append((time.perf_counter() - t0) * 1000.0)

    wall = in_threads(len(apis), work)
    flat = [t for row in latencies for t in row]

    def close(i):
        for sid in sids[i::len(apis)]:
            apis[i].close_session(sid)

    in_threads(len(apis), close)
    return {"label": label, "open": level, "open_s": open_s, "mb_per": (after - before) / level,
            "p50": statistics.median(flat), "p99": percentile(flat, 0.99), "steps_s": len(flat) / wall}


def _client_process(base: str, token: str, sids: list[str], seconds: float) -> int:
    """One client process: a thread per session, each stepping it in a loop for `seconds`."""
    counts = [0] * len(sids)
    apis = [Api(base, token) for _ in sids]
    stop = time.monotonic() + seconds

    def work(i):
        while time.monotonic() < stop:
            apis[i].step(sids[i])
            counts[i] += 1

    in_threads(len(sids), work)
    for api in apis:
        api.close()
    return sum(counts)


def concurrent_steps_per_s(bases: list[str], token: str, sids: list[str], processes: int, seconds: float = 5.0) -> float:
    """Clients spread over `processes` processes (one Python process cannot drive 64 HTTP clients at speed)."""
    from concurrent.futures import ProcessPoolExecutor

    groups = [sids[i::processes] for i in range(processes)]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        futures = [pool.submit(_client_process, bases[i % len(bases)], token, group, seconds) for i, group in enumerate(groups) if group]
        return sum(f.result() for f in futures) / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--levels", default="1,64,256")
    parser.add_argument("--shared-levels", default="")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--web", type=int, default=2)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--host-threads", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=1, help="episode host processes (episodes spread over them)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()

    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would swamp the table
    shared_levels = [int(x) for x in args.shared_levels.split(",") if x]
    token, version, shared_version = create_fixtures(max(shared_levels, default=0) // 8 if shared_levels else 0)
    prefix = f"bench-{os.getpid()}"
    webs = [start_web(args.database_url, prefix) for _ in range(args.web)]
    hosts = [start_host(args.database_url, prefix, args.host_threads) for _ in range(args.hosts)]
    try:
        bare = bare_sandbox_steps_per_s()
        api = Api(webs[0][1], token)
        sid = api.open(version, 0)
        for _ in range(50):
            api.step(sid)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            api.step(sid)
            times.append((time.perf_counter() - t0) * 1000.0)
        api.close_session(sid)
        median = statistics.median(times)
        print(f"\nRound trip, one session, {args.steps} steps (client -> web -> Redis -> episode host -> sandbox -> back)")
        print(f"  median {median:.2f} ms   p99 {percentile(times, 0.99):.2f} ms   target: median < 2 ms "
              f"{'OK' if median < 2 else 'MISSED'}   bare sandbox step {1000 / bare:.3f} ms ({bare:,.0f} steps/s)")

        apis = [Api(webs[i % len(webs)][1], token) for i in range(args.clients)]
        rows = [level_row(apis, hosts, version, level, "one sandbox each") for level in [int(x) for x in args.levels.split(",") if x]]
        rows += [level_row(apis, hosts, shared_version, level, "shared sandboxes") for level in shared_levels]
        print(f"\nOpen episodes ({args.clients} client threads over {args.web} web processes, {args.hosts} episode host(s))")
        print(f"  {'sandboxes':<17} {'open':>6} {'open s':>7} {'MB/episode':>11} {'step p50':>9} {'p99':>8} {'steps/s':>8}")
        for row in rows:
            print(f"  {row['label']:<17} {row['open']:>6} {row['open_s']:>7.1f} {row['mb_per']:>11.2f} {row['p50']:>6.2f} ms "
                  f"{row['p99']:>8.2f} {row['steps_s']:>8.0f}")

        sids = open_many(apis, version, args.clients)
        servers = [proc.pid for proc in hosts] + [proc.pid for proc, _ in webs]
        cpu_before = [tree_cpu_s(pid) for pid in servers]
        concurrent = concurrent_steps_per_s([w[1] for w in webs], token, sids, args.client_processes)
        cpu_used = [tree_cpu_s(pid) - before for pid, before in zip(servers, cpu_before)]
        server_cpu_ms = sum(cpu_used) * 1000 / (concurrent * 5.0)
        host_cpu_ms = sum(cpu_used[: len(hosts)]) * 1000 / (concurrent * 5.0)
        batches = 100
        started = time.perf_counter()
        for _ in range(batches):
            results = apis[0].steps(sids[:64])
        batched = batches * len(results) / (time.perf_counter() - started)
        assert all(result["ok"] for result in results), results[:2]
        for sid in sids:
            apis[0].close_session(sid)
        print("\nAggregate stepping")
        print(f"  {args.clients} concurrent clients: {concurrent:>8,.0f} steps/s   target >= 5,000 "
              f"{'OK' if concurrent >= 5000 else 'MISSED'}   ({concurrent / bare:.2f}x the bare sandbox loop)"
              f"   server CPU {server_cpu_ms:.2f} ms a step"
              f" (host + sandboxes {host_cpu_ms:.2f}, web {server_cpu_ms - host_cpu_ms:.2f})")
        print(f"  batches of 64 from one client: {batched:>8,.0f} steps/s   target >= 20,000 "
              f"{'OK' if batched >= 20000 else 'MISSED'}   ({batched / bare:.2f}x the bare sandbox loop)")
        for api_ in apis:
            api_.close()
    finally:
        for proc in hosts:
            proc.terminate()
            proc.wait(timeout=30)
        for proc, _ in webs:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
