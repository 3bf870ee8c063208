"""OpenEnv's wire protocol: the studio's endpoint against OpenEnv's own reference server, same machine,
same trivial environment, same client code; plus the studio's batched (vector) stepping.

    .venv/bin/python bench/bench_protocols.py [--clients 1,8,32] [--steps 2000] [--database-url URL]

Starts one uvicorn process of the studio and one episode host against its own database
(`studio_bench_protocols`, created and migrated if missing), and OpenEnv's reference server
(openenv-core's `create_fastapi_app` under uvicorn, one process) serving the same trivial environment.
For each level N, N concurrent OpenEnv websocket sessions (the messages openenv-core's client sends:
reset, then step after step) share `--steps` steps; step round trip median/p95 and aggregate steps/s
are measured on both servers, then the studio's vector stepping (POST /api/v1/sessions/step, N
episodes a request, one client) gives steps/s at the same N. The studio records every step (checked
against the database at the end); the reference server records nothing.
Targets: studio latency within 1.25x of OpenEnv's; vector stepping ahead of OpenEnv in steps/s.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_episodes import ENV_PY, Api, free_port, server_env, start_host, start_web  # noqa: E402
from bench_support import percentile, prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_protocols"

# The same trivial environment as the studio's bench version (bench_episodes.ENV_PY), in OpenEnv's terms.
REFERENCE_APP = textwrap.dedent('''
    from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app


    class TrivialAction(Action):
        action: int = 1


    class TrivialObservation(Observation):
        t: int = 0


    class TrivialEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            self._state = State(episode_id=episode_id, step_count=0)
            return TrivialObservation(t=0)

        def step(self, action, timeout_s=None, **kwargs):
            self._state.step_count += 1
            return TrivialObservation(t=self._state.step_count, reward=0.0, done=False)

        @property
        def state(self):
            return self._state


    app = create_fastapi_app(TrivialEnv, TrivialAction, TrivialObservation, max_concurrent_envs=1024)
''')


def create_fixtures() -> tuple[str, str]:
    """A team, an owner's token and a version of the trivial environment (bench_episodes.ENV_PY)."""
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
        "environment.toml": 'name = "trivial"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 100000\n'
                            "\n[limits]\nepisode_timeout_s = 3600\nmemory_mb = 128\n",
        "env.py": ENV_PY,
        "tasks.jsonl": json.dumps({"id": "t1", "difficulty": 1}) + "\n",
    }
    env = env_services.environment_create(team=team, actor=user, name="trivial", slug="trivial", files=files)
    return raw, env_services.version_commit(environment=env, actor=user, message="bench", files=files).label


def start_reference(folder: Path) -> tuple[subprocess.Popen, str]:
    (folder / "reference_env.py").write_text(REFERENCE_APP)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "reference_env:app", "--app-dir", str(folder), "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log"], cwd=folder,
    )
    import httpx

    deadline = time.monotonic() + 300  # importing openenv-core (fastmcp, gradio's guards) is slow on a busy machine
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{port}"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("OpenEnv's reference server did not start")


async def openenv_sessions(ws_url: str, clients: int, steps_each: int, warmup: int = 20) -> dict:
    """`clients` concurrent OpenEnv sessions (the messages openenv-core's EnvClient sends)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    times: list[float] = []
    rollouts: list[int] = []

    async def session(index: int):
        async with connect(ws_url, max_size=100 * 1024 * 1024) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": index}}))
            reply = json.loads(await ws.recv())
            if reply["type"] != "observation":
                raise SystemExit(f"reset answered {reply}")
            rollout = (reply["data"]["observation"].get("metadata") or {}).get("rollout_id")  # the studio's facts
            if rollout is not None:
                rollouts.append(rollout)
            message = json.dumps({"type": "step", "data": {"action": 1}})
            for _ in range(warmup):
                await ws.send(message)
                await ws.recv()
            await barrier.wait()
            for _ in range(steps_each):
                started = time.perf_counter()
                await ws.send(message)
                reply = await ws.recv()
                times.append((time.perf_counter() - started) * 1000.0)
                if '"type":"error"' in reply.replace(" ", ""):
                    raise SystemExit(f"step answered {reply}")
            await ws.send(json.dumps({"type": "close"}))
            # Both servers end the connection on "close": wait for it instead of tearing the socket
            # down first (OpenEnv's server logs a traceback for every client that closes before it does).
            try:
                await asyncio.wait_for(ws.recv(), timeout=5)
            except (ConnectionClosed, asyncio.TimeoutError):
                pass

    barrier = asyncio.Barrier(clients + 1)
    tasks = [asyncio.create_task(session(i)) for i in range(clients)]
    await barrier.wait()
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    return {"p50": statistics.median(times), "p95": percentile(times, 0.95), "steps_s": len(times) / elapsed,
            "steps": len(times) + warmup * clients, "rollouts": rollouts}


def vector_steps_per_s(api: Api, version: str, episodes: int, rounds: int) -> tuple[float, list[str]]:
    sids = [api.open(version, seed) for seed in range(episodes)]
    for _ in range(5):
        api.steps(sids)
    started = time.perf_counter()
    for _ in range(rounds):
        results = api.steps(sids)
    elapsed = time.perf_counter() - started
    assert all(result["ok"] for result in results), results[:2]
    return rounds * episodes / elapsed, sids


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--steps", type=int, default=2000, help="steps measured per level, shared by its clients")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()
    levels = [int(level) for level in args.clients.split(",")]

    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")  # plain HTTP on loopback (the servers run with DEBUG off)
    # The key in the base URL is derived with SECRET_KEY: the same one as the servers (bench_episodes.server_env).
    os.environ["SECRET_KEY"] = server_env(args.database_url, "")["SECRET_KEY"]
    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    from environments.selectors import version_by_label
    from runs.models import Rollout
    from runs.protocols.keys import openenv_base_path, openenv_key_get_or_create
    from studio.models import ApiToken, hash_token

    token, label = create_fixtures()
    api_token = ApiToken.objects.select_related("team", "user").get(token_hash=hash_token(token))
    version = version_by_label(team=api_token.team, label=label)
    key = openenv_key_get_or_create(team=api_token.team, actor=api_token.user, version=version)
    prefix = f"bench-protocols-{os.getpid()}"
    rows, recorded_expected, rollout_ids, started = [], 0, [], []
    try:
        web, web_url = start_web(args.database_url, prefix)
        started.append(web)
        started.append(start_host(args.database_url, prefix))
        reference, reference_url = start_reference(Path(tempfile.mkdtemp(prefix="bench-openenv-")))
        started.append(reference)
        studio_ws = web_url.replace("http://", "ws://") + openenv_base_path(version=version, key=key) + "/ws"
        reference_ws = reference_url.replace("http://", "ws://") + "/ws"
        api = Api(web_url, token)
        for clients in levels:
            steps_each = max(20, args.steps // clients)
            reference_row = asyncio.run(openenv_sessions(reference_ws, clients, steps_each))
            studio_row = asyncio.run(openenv_sessions(studio_ws, clients, steps_each))
            recorded_expected += studio_row["steps"]
            rollout_ids += studio_row["rollouts"]
            vector, sids = vector_steps_per_s(api, label, clients, max(20, args.steps // clients))
            for sid in sids:
                api.close_session(sid)
            rows.append((clients, reference_row, studio_row, vector))
        api.close()
        # Every step of the studio's OpenEnv sessions is stored (closed sessions flush their steps).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stored = sum(Rollout.objects.filter(pk__in=rollout_ids).values_list("step_count", flat=True))
            if stored >= recorded_expected:
                break
            time.sleep(0.2)
    finally:
        for proc in reversed(started):
            proc.terminate()
            proc.wait(timeout=30)

    print("\nOpenEnv protocol, trivial environment, one server process each (studio: + one episode host)")
    print(f"  {'clients':>7} | {'OpenEnv p50':>11} {'p95':>7} {'steps/s':>8} | {'studio p50':>10} {'p95':>7} {'steps/s':>8} "
          f"| {'p50 ratio':>9} | {'studio vector':>13} {'vs OpenEnv':>10}")
    for clients, ref, studio, vector in rows:
        ratio = studio["p50"] / ref["p50"]
        print(f"  {clients:>7} | {ref['p50']:>8.2f} ms {ref['p95']:>7.2f} {ref['steps_s']:>8,.0f} | "
              f"{studio['p50']:>7.2f} ms {studio['p95']:>7.2f} {studio['steps_s']:>8,.0f} | {ratio:>8.2f}x "
              f"{'OK' if ratio <= 1.25 else 'MISSED':>6} | {vector:>9,.0f}/s {vector / ref['steps_s']:>9.1f}x "
              f"{'OK' if vector > ref['steps_s'] else 'MISSED'}")
    print(f"\n  studio steps recorded: {stored:,} of {recorded_expected:,} sent over OpenEnv "
          f"({'all' if stored >= recorded_expected else 'MISSING SOME'}); the reference server records none")
    print("  targets: studio p50 within 1.25x of OpenEnv's; vector stepping (N episodes a request) ahead in steps/s")


if __name__ == "__main__":
    main()
