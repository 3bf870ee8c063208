"""Review speed: JSONL export throughput (steps/s written, memory held) for a run of 1,000 rollouts x
100 steps, and the review screen's "next item" latency with 100,000 rollouts in the team's queue.

    .venv/bin/python bench/bench_review.py [--rollouts 1000] [--steps 100] [--queue 100000] [--keep]

Uses its own database, `studio_bench_review` (created and migrated here, dropped afterwards unless
--keep), on the server of DATABASE_URL (default postgres://postgres@127.0.0.1:5432). Targets: export
over 50,000 steps/s with flat memory; next item under 300 ms.
"""
import argparse
import os
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import dj_database_url
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
BENCH_DB = "studio_bench_review"
_server = dj_database_url.parse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/studio"))
_admin_dsn = f"host={_server['HOST']} port={_server['PORT'] or 5432} user={_server['USER']} dbname=postgres" + (
    f" password={_server['PASSWORD']}" if _server.get("PASSWORD") else "")
os.environ["DATABASE_URL"] = (
    f"postgres://{_server['USER']}{':' + _server['PASSWORD'] if _server.get('PASSWORD') else ''}"
    f"@{_server['HOST']}:{_server['PORT'] or 5432}/{BENCH_DB}"
)


def recreate_database(drop_only=False):
    with psycopg.connect(_admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup_cast():
    from django.contrib.auth import get_user_model

    from runs.services import agent_get_or_create
    from studio.models import Membership, Role, Team
    from tests.review.conftest import ENV_PY
    from tests.runs.rollout_factories import package_version

    team = Team.objects.create(slug="bench-review", name="Bench review")
    owner = get_user_model().objects.create_user(username="bench-owner", password="x-bench-password-1")
    reviewer = get_user_model().objects.create_user(username="bench-reviewer", password="x-bench-password-1")
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    Membership.objects.create(team=team, user=reviewer, role=Role.REVIEWER)
    version = package_version(team, owner, "bench-env", ENV_PY)
    agent = agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    return team, owner, reviewer, version, agent


def make_rollouts(team, version, agent, owner, n, steps, *, approve=False):
    """A run of n rollouts with `steps` steps each, verifier proposals, and optionally approvals."""
    from runs.models import LabelDecision, LabelSource, RewardLabel, Rollout, Run, Step

    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0],
                             status="finished", created_by=owner)
    batch = 5_000
    for start in range(0, n, batch):
        rollouts = Rollout.objects.bulk_create(
            Rollout(team=team, run=run, task_id="t1", seed=i, step_count=steps, verifier_reward=float(i % 3 > 0),
                    verifier_reason="checked", total_reward=1.0, status="succeeded", initial_observation={"grid": "S..G"})
            for i in range(start, min(n, start + batch))
        )
        labels = [RewardLabel(team=team, rollout=r, source=LabelSource.VERIFIER, value=r.verifier_reward,
                              decision=LabelDecision.PROPOSED) for r in rollouts]
        if approve:
            labels += [RewardLabel(team=team, rollout=r, source=LabelSource.HUMAN, value=r.verifier_reward,
                                   decision=LabelDecision.APPROVED, reviewer=owner) for r in rollouts]
        RewardLabel.objects.bulk_create(labels)
        step_rows = (
            Step(rollout=r, index=i, action={"tool": "move", "arguments": {"dir": "left", "n": i % 4}},
                 observation={"grid": "S.x.G", "pos": [i % 5, i % 7], "text": "you moved one square to the left"},
                 reward=0.0, terminated=i == steps - 1, info={"valid": True, "elapsed": 0.001 * i})
            for r in rollouts for i in range(steps)
        )
        Step.objects.bulk_create(step_rows, batch_size=5_000)
    return run


def export_stream(run, fmt):
    """The export's pieces: JSONL lines, or Parquet byte chunks for "<format>+parquet"."""
    from runs.review.export import export_lines
    from runs.review.export_parquet import parquet_chunks

    fmt, _, file = fmt.partition("+")
    lines = export_lines(run.rollouts.all(), decision="approved", fmt=fmt)
    return parquet_chunks(lines, fmt=fmt) if file == "parquet" else lines


def bench_export(run, fmt):
    rss_before = rss_mb()
    started = time.perf_counter()
    lines = steps = written = 0
    rss_peak = rss_before
    for line in export_stream(run, fmt):
        lines += 1
        written += len(line)
        if lines % 100 == 0:
            rss_peak = max(rss_peak, rss_mb())
    elapsed = time.perf_counter() - started
    steps = run.rollouts.count() and sum(run.rollouts.values_list("step_count", flat=True))
    tracemalloc.start()
    for _ in export_stream(run, fmt):
        pass
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"lines": lines, "steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed, "mb": written / 2**20,
            "rss_growth_mb": rss_peak - rss_before, "traced_peak_mb": traced_peak / 2**20}


def timed(fn, repeat=5):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--queue", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true", help="keep the bench database afterwards")
    args = parser.parse_args()

    recreate_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from runs.review import selectors
    from runs.review.selectors import QueueFilters
    from studio import services as studio_services

    setup_test_environment()
    try:
        call_command("migrate", verbosity=0)
        team, owner, reviewer, version, agent = setup_cast()

        t0 = time.perf_counter()
        export_run = make_rollouts(team, version, agent, owner, args.rollouts, args.steps, approve=True)
        print(f"made {args.rollouts} rollouts x {args.steps} steps in {time.perf_counter() - t0:.1f} s")
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")

        print(f"\nexport, run of {args.rollouts} rollouts x {args.steps} steps (decision approved)")
        print(f"{'format':<18}{'steps/s':>12}{'seconds':>10}{'MB out':>10}{'RSS growth MB':>16}{'traced peak MB':>16}")
        for fmt in ("trajectory", "chat", "trajectory+parquet", "chat+parquet"):
            r = bench_export(export_run, fmt)
            print(f"{fmt:<18}{r['steps_per_s']:>12,.0f}{r['seconds']:>10.2f}{r['mb']:>10.1f}"
                  f"{r['rss_growth_mb']:>16.1f}{r['traced_peak_mb']:>16.1f}")

        t0 = time.perf_counter()
        queue_run = make_rollouts(team, version, agent, owner, args.queue, 0)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(f"\nmade {args.queue} queued rollouts in {time.perf_counter() - t0:.1f} s")
        ids = list(queue_run.rollouts.order_by("id").values_list("id", flat=True))
        middle = ids[len(ids) // 2]
        _, raw = studio_services.token_create(team=team, actor=reviewer, name="bench")
        client = Client(headers={"Authorization": f"Bearer {raw}"})

        def api_next(**params):
            response = client.get("/api/v1/review/next", params)
            assert response.status_code == 200, response.content
            return response.json()["item"]["id"]

        cases = [
            ("next_in_queue, first", lambda: selectors.next_in_queue(team=team, reviewer=reviewer).pk),
            ("next_in_queue, after the middle item", lambda: selectors.next_in_queue(team=team, reviewer=reviewer, after_rollout_id=middle).pk),
            ("next_in_queue, outcome=fail, reward 0..0.5", lambda: selectors.next_in_queue(
                team=team, reviewer=reviewer, filters=QueueFilters(verifier_outcome="fail", min_reward=0, max_reward=0.5)).pk),
            ("next_in_queue, run + environment + version", lambda: selectors.next_in_queue(
                team=team, reviewer=reviewer, after_rollout_id=middle,
                filters=QueueFilters(run_id=queue_run.pk, environment="bench-env", version=1)).pk),
            ("GET /api/v1/review/next (token auth, JSON)", lambda: api_next(after=middle)),
            ("GET /api/v1/review/next?count=true", lambda: api_next(after=middle, count="true")),
            ("queue count (whole queue)", lambda: selectors.review_queue(team=team, reviewer=reviewer).count()),
        ]
        print(f"\nreview queue with {args.queue:,} rollouts waiting (plus {args.rollouts:,} already reviewed)")
        print(f"{'query':<50}{'median ms':>12}{'max ms':>10}")
        for name, fn in cases:
            median, worst, _ = timed(fn)
            print(f"{name:<50}{median:>12.1f}{worst:>10.1f}")

        # The reviewer has worked through the first half: next must skip what they decided.
        from runs.models import LabelDecision, LabelSource, RewardLabel

        RewardLabel.objects.bulk_create(
            (RewardLabel(team=team, rollout_id=rid, source=LabelSource.HUMAN, value=1.0, decision=LabelDecision.APPROVED,
                         reviewer=reviewer) for rid in ids[: len(ids) // 2]), batch_size=5_000)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        median, worst, got = timed(lambda: selectors.next_in_queue(team=team, reviewer=reviewer).pk)
        assert got == middle, (got, middle)
        print(f"{'next_in_queue, first half decided (worst case)':<50}{median:>12.1f}{worst:>10.1f}")
        median, worst, _ = timed(lambda: api_next(after=ids[len(ids) // 2 + 10]))
        print(f"{'GET /api/v1/review/next, first half decided':<50}{median:>12.1f}{worst:>10.1f}")
    finally:
        connection.close()
        if not args.keep:
            recreate_database(drop_only=True)


if __name__ == "__main__":
    main()
