"""What a page or list endpoint costs as the data behind it grows: server time (median of a few
requests through Django's test client, so no network) and response size at 1k / 10k / 100k.

    .venv/bin/python bench/bench_pages.py [--levels 1000,10000,100000] [--repeat 5] [--keep]

Data is made with bulk SQL in its own database, `<DATABASE_URL's name>_bench_pages` (created here, dropped afterwards
unless --keep), on the server of DATABASE_URL. At each level N:
- run page, `GET /api/v1/runs/{id}` and the run's rollouts API: one run of N rollouts (10 tasks);
- runs list page and API: 25 runs sharing N rollouts;
- review queue page, next item and queue API: N rollouts queued for two reviews each, for a reviewer who
  decided none and for one who decided 90% of them (which stay in the queue, waiting for a second review);
  a re-verification judges a tenth of those decided otherwise: the queue's disagreement filter, page and API;
- steps API and replay window: a rollout of N steps, its first, middle and last page.
The last column is the ratio of the largest level to the smallest (goal: under 1.5x).
- a version of N tasks (tasks.jsonl of ~100 bytes a task): its page, the run form and the environments
  list (issue 15: pages that do not need a version's files and tasks never load them).
Targets at 100k (issue 16): run page < 60 ms and < 100 KB, runs list < 30 ms, queue page and next item
< 60 ms whatever the reviewer decided, steps API any page < 25 ms.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import dj_database_url
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
_server = dj_database_url.parse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/studio"))
BENCH_DB = f"{_server['NAME']}_bench_pages"  # beside the checkout's own database, so checkouts never share it
_admin_dsn = f"host={_server['HOST']} port={_server['PORT'] or 5432} user={_server['USER']} dbname=postgres" + (
    f" password={_server['PASSWORD']}" if _server.get("PASSWORD") else "")
os.environ["DATABASE_URL"] = (
    f"postgres://{_server['USER']}{':' + _server['PASSWORD'] if _server.get('PASSWORD') else ''}"
    f"@{_server['HOST']}:{_server['PORT'] or 5432}/{BENCH_DB}"
)
TASKS = [f"t{i}" for i in range(10)]
TARGETS_MS = {"run page": 60, "runs list page": 30, "runs API": 30, "queue page": 60, "queue page, 90% decided": 60,
              "next item": 60, "next item, 90% decided": 60, "queue page, disagreement filter": 60, "steps API first": 25, "steps API middle": 25,
              "steps API last": 25}


def recreate_database(drop_only=False):
    with psycopg.connect(_admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")


def setup_cast(level):
    from django.contrib.auth import get_user_model

    from runs.services import agent_get_or_create
    from studio.models import Membership, Role, Team
    from tests.runs.rollout_factories import package_version

    team = Team.objects.create(slug=f"bench-{level}", name=f"Bench {level}")
    users = {}
    for name, role in (("owner", Role.OWNER), ("fresh", Role.REVIEWER), ("busy", Role.REVIEWER)):
        users[name] = get_user_model().objects.create_user(username=f"{name}-{level}", password="x-bench-password-1")
        Membership.objects.create(team=team, user=users[name], role=role)
    tasks = [{"id": t, "difficulty": i % 3 + 1} for i, t in enumerate(TASKS)]
    version = package_version(team, users["owner"], f"bench-env-{level}", ENV_PY, tasks=tasks)
    agent = agent_get_or_create(team=team, actor=users["owner"], name="random", kind="random")
    return team, users, version, agent


ENV_PY = '''
from studio_sdk import Environment

class Env(Environment):
    def reset(self, task, seed):
        return {"n": 0}

    def step(self, action):
        return {"n": 1}, 1.0, True, False, {}

    def verify(self):
        return 1.0, "ok"
'''


def make_run(team, version, agent, owner, n, reviews_required=1):
    from runs.models import Rollout, Run

    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=TASKS, seeds=[0],
                             status="finished", created_by=owner, reviews_required=reviews_required)
    statuses = ["succeeded", "failed", "succeeded", "errored", "succeeded"]
    for start in range(0, n, 10_000):
        Rollout.objects.bulk_create(
            Rollout(team=team, run=run, task_id=TASKS[i % len(TASKS)], seed=i, step_count=1 + i % 9,
                    status=statuses[i % len(statuses)], total_reward=(i % 7) / 3.0,
                    verifier_reward=float(i % 2), verifier_reason="checked", initial_observation={"n": 0})
            for i in range(start, min(n, start + 10_000))
        )
    return run


def spread_runs(team, version, agent, owner, n, runs=25):
    made = [make_run(team, version, agent, owner, n // runs) for _ in range(runs)]
    return made


def make_queue(team, run, reviewer, decided_fraction):
    """A verifier proposal on every rollout of `run`, and human approvals by `reviewer` on a fraction."""
    from runs.models import LabelDecision, LabelSource, RewardLabel

    ids = list(run.rollouts.order_by("id").values_list("id", "verifier_reward"))
    for start in range(0, len(ids), 10_000):
        chunk = ids[start:start + 10_000]
        RewardLabel.objects.bulk_create(
            RewardLabel(team=team, rollout_id=i, source=LabelSource.VERIFIER, value=v, decision=LabelDecision.PROPOSED)
            for i, v in chunk)
    decided = ids[: int(len(ids) * decided_fraction)]
    for start in range(0, len(decided), 10_000):
        RewardLabel.objects.bulk_create(
            RewardLabel(team=team, rollout_id=i, source=LabelSource.HUMAN, value=v, decision=LabelDecision.APPROVED,
                        reviewer=reviewer)
            for i, v in decided[start:start + 10_000])
    # A re-verification that judges every tenth decided rollout otherwise: those are in disagreement.
    flipped = decided[::10]
    for start in range(0, len(flipped), 10_000):
        RewardLabel.objects.bulk_create(
            RewardLabel(team=team, rollout_id=i, source=LabelSource.VERIFIER, value=0.0 if (v or 0) > 0 else 1.0,
                        decision=LabelDecision.PROPOSED, rationale="re-verified")
            for i, v in flipped[start:start + 10_000])


def make_steps(team, version, agent, owner, n):
    from runs.models import Rollout, Run, Step

    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t0"], seeds=[0],
                             status="finished", created_by=owner)
    rollout = Rollout.objects.create(team=team, run=run, task_id="t0", seed=0, step_count=n, status="succeeded",
                                     total_reward=1.0, initial_observation={"n": 0})
    for start in range(0, n, 10_000):
        Step.objects.bulk_create(
            Step(rollout=rollout, index=i, action={"move": i % 4}, observation={"grid": "S.x.G", "pos": [i % 5, i % 7]},
                 reward=0.0, terminated=i == n - 1, info={})
            for i in range(start, min(n, start + 10_000)))
    return rollout


def make_large_version(team, owner, n):
    """A version whose tasks.jsonl has n tasks (about 100 bytes each: 10 MB at 100k)."""
    from tests.runs.rollout_factories import package_version

    tasks = [{"id": f"task-{i}", "difficulty": 1 + i % 3, "prompt": "p" * 60} for i in range(n)]
    return package_version(team, owner, "bench-large", ENV_PY, tasks=tasks)


def kept_data(level):
    """What setup_cast, make_run and make_steps made at `level` in a kept database."""
    from django.contrib.auth import get_user_model

    from runs.models import Rollout, Run
    from studio.models import Team

    team = Team.objects.get(slug=f"bench-{level}")
    users = {name: get_user_model().objects.get(username=f"{name}-{level}") for name in ("owner", "fresh", "busy")}
    run = Run.objects.filter(team=team).order_by("id").first()
    rollout = Rollout.objects.filter(team=team, task_id="t0", seed=0, step_count=level).order_by("-id").first()
    return team, users, run, rollout


def timed(client, url, repeat, **headers):
    times, size, status = [], 0, None
    for _ in range(repeat + 1):
        started = time.perf_counter()
        response = client.get(url, follow=True, **headers)  # next item: the redirect and the item page
        body = response.content if not response.streaming else b"".join(response.streaming_content)
        times.append((time.perf_counter() - started) * 1000)
        size, status = len(body), response.status_code
    if status != 200:
        raise SystemExit(f"{url} answered {status}")
    return statistics.median(times[1:]), size  # the first request warms caches


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="measure the data a --keep run left (no generation)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    if not args.reuse:
        recreate_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from studio import services as studio_services

    setup_test_environment()
    call_command("migrate", verbosity=0)
    rows = {}
    try:
        for level in levels:
            if args.reuse:
                team, users, run, rollout = kept_data(level)
            else:
                made = time.perf_counter()
                team, users, version, agent = setup_cast(level)
                    # Two reviews each: what the busy reviewer decided stays in the team's open queue.
                run = make_run(team, version, agent, users["owner"], level, reviews_required=2)
                spread_runs(team, version, agent, users["owner"], level)
                make_queue(team, run, users["busy"], 0.9)
                rollout = make_steps(team, version, agent, users["owner"], level)
                make_large_version(team, users["owner"], level)
                with connection.cursor() as cursor:
                    cursor.execute("VACUUM ANALYZE")  # as autovacuum would have by then
                print(f"level {level}: data made in {time.perf_counter() - made:.1f} s", file=sys.stderr)

            token = studio_services.token_create(team=team, actor=users["owner"], name="bench")[1]
            api = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
            owner, fresh, busy = Client(), Client(), Client()
            owner.force_login(users["owner"])
            fresh.force_login(users["fresh"])
            busy.force_login(users["busy"])
            t = f"/t/{team.slug}"
            pages = [
                ("run page", owner, f"{t}/runs/{run.pk}/", {}),
                ("run API", owner, f"/api/v1/runs/{run.pk}", api),
                ("run rollouts API", owner, f"/api/v1/runs/{run.pk}/rollouts", api),
                ("runs list page", owner, f"{t}/runs/", {}),
                ("runs API", owner, "/api/v1/runs", api),
                ("queue page", fresh, f"{t}/review/", {}),
                ("queue page, 90% decided", busy, f"{t}/review/", {}),
                ("next item", fresh, f"{t}/review/next/", {}),
                ("next item, 90% decided", busy, f"{t}/review/next/", {}),
                ("queue API", owner, "/api/v1/review/queue", api),
                ("queue page, disagreement filter", busy, f"{t}/review/?disagreement=1", {}),
                ("queue API, disagreement filter", owner, "/api/v1/review/queue?disagreement=true", api),
                ("version page, N tasks", owner, f"{t}/environments/bench-large/versions/1/", {}),
                ("run form, N tasks", owner, f"{t}/runs/new/?version=bench-large@1", {}),
                ("environments list", owner, f"{t}/environments/", {}),
                ("versions API, N tasks", owner, "/api/v1/environments/bench-large/versions", api),
                ("steps API first", owner, f"/api/v1/rollouts/{rollout.pk}/steps?offset=0", api),
                ("steps API middle", owner, f"/api/v1/rollouts/{rollout.pk}/steps?offset={level // 2}", api),
                ("steps API last", owner, f"/api/v1/rollouts/{rollout.pk}/steps?offset={max(0, level - 100)}", api),
            ]
            for name, client, url, headers in pages:
                ms, size = timed(client, url, args.repeat, **headers)
                rows.setdefault(name, {})[level] = (ms, size)
    finally:
        if not (args.keep or args.reuse):
            connection.close()
            recreate_database(drop_only=True)

    head = f"{'page or endpoint':28}" + "".join(f"{f'{lv:,}':>20}" for lv in levels) + f"{'ratio':>8}{'target':>10}"
    print(head)
    print("-" * len(head))
    for name, by_level in rows.items():
        cells = "".join(f"{f'{by_level[lv][0]:.1f} ms {by_level[lv][1] / 1024:.0f} KB':>20}" for lv in levels)
        ratio = by_level[levels[-1]][0] / by_level[levels[0]][0]
        target = TARGETS_MS.get(name)
        verdict = "" if target is None else ("met" if by_level[levels[-1]][0] < target else "MISSED") + f" <{target}"
        print(f"{name:28}{cells}{ratio:>7.1f}x{verdict:>10}")


if __name__ == "__main__":
    main()
