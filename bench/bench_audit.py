"""Quality-lab speed: an audit of a demo environment end to end on one worker, and replay-based
re-verification of stored rollouts.

    .venv/bin/python bench/bench_audit.py [--seeds 0-4] [--concurrency 2] [--reverify 1000] [--demos all|NAME,NAME]

1. Audit of guess_number (5 tasks x 5 seeds; probes noop, random, claim, peek; its oracle; determinism
   pairs, whose first episodes are the random probe's) through one real Celery worker (--concurrency processes): wall time from audit_start to the
   stored report, and rollouts/s. Peer, same worker, same run: an ordinary run of the oracle agent on
   the same tasks and seeds (rollouts/s). Target: the audit under 60 s on these 2-core machines.
2. Re-verification of N stored rollouts (copies of the audit's oracle rollouts, steps and all, in a
   second version) by replaying their actions on the audited version, as the background job the page
   and the API queue, on the same worker: rollouts/s, against re-running the agent (the peer's).
3. With --demos: an audit of every demo package seed_demo loads (or the named ones), one after the
   other on the same worker: each one's card (status, lines that are not green), rollouts and wall time.

Uses its own database (BENCH_DATABASE_URL, default studio_bench_quality; created and migrated) and Redis.
"""
import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_support import prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/studio_bench_quality"


def start_worker(url: str, queue: str, concurrency: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "CELERY_QUEUE": queue, "LOG_LEVEL": "WARNING"}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "studio", "worker", "-Q", queue, "-c", str(concurrency),
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning", "-n", f"{queue}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"), start_new_session=True,
    )


def wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes of the one worker")
    parser.add_argument("--reverify", type=int, default=1000, help="stored rollouts to re-verify")
    parser.add_argument("--demos", default="", help="also audit these demo packages ('all': every one)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    args = parser.parse_args()

    prepare_database(args.database_url)
    os.environ["DATABASE_URL"] = args.database_url
    queue = f"bench-audit-{uuid.uuid4().hex[:8]}"
    os.environ["CELERY_QUEUE"] = queue
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from environments import services as env_services
    from environments.demo import DEMO_DIR, read_folder
    from runs import services as run_services
    from runs.seeds import parse_seeds
    from runs.models import Rollout, RunStatus
    from runs.quality import services
    from studio.models import Membership, Role, Team

    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.OWNER})
    files = read_folder(DEMO_DIR / "guess_number")
    slug = f"guess-{uuid.uuid4().hex[:6]}"
    env = env_services.environment_create(team=team, actor=user, name=slug, slug=slug, files=files)
    version = env_services.version_commit(environment=env, actor=user, message="bench", files=files)
    seeds = parse_seeds(args.seeds)

    worker = start_worker(args.database_url, queue, args.concurrency, Path(f"/tmp/{queue}.log"))
    try:
        # Warm the worker (imports, URL resolver) with one rollout, so neither measurement pays for it.
        oracle = run_services.agent_get_or_create(team=team, actor=user, name=f"{slug}-oracle", kind="scripted",
                                                  code=files["agent.py"])
        warm = run_services.run_create(team=team, actor=user, version=version, agent=oracle, task_ids=["t1"], seeds=[0])
        wait(lambda: run_status(warm) == RunStatus.FINISHED, 120, "the warm-up rollout")

        started = time.perf_counter()
        peer = run_services.run_create(team=team, actor=user, version=version, agent=oracle, seeds=seeds)
        wait(lambda: run_status(peer) == RunStatus.FINISHED, 600, "the peer run")
        peer_s = time.perf_counter() - started
        peer_n = peer.rollouts.count()

        started = time.perf_counter()
        audit = services.audit_start(version=version, actor=user, seeds=seeds)

        def over():
            audit.refresh_from_db()
            return audit.is_over

        wait(over, 900, "the audit")
        audit_s = time.perf_counter() - started
        audit_n = Rollout.objects.filter(run__audit_role__audit=audit).count()
        by_role = {entry.name: entry.run.rollouts.count() for entry in audit.audit_runs.select_related("run")}
        job, reverify_s = reverify_copies(audit, version=version, team=team, user=user, count=args.reverify)
        demo_rows = audit_demos(args.demos, team=team, user=user, seeds=seeds) if args.demos else []
    finally:
        os.killpg(worker.pid, 9)
        worker.wait()

    print(f"\nAudit of {version.label}: {len(version.tasks)} tasks x {len(seeds)} seeds, one worker (-c {args.concurrency})")
    print(f"  runs: {', '.join(f'{name} {n}' for name, n in by_role.items())}; status {audit.status}")
    print(f"{'measure':<44}{'rollouts':>9}{'wall s':>9}{'rollouts/s':>12}")
    print(f"{'audit (probes, oracle, determinism, report)':<44}{audit_n:>9}{audit_s:>9.1f}{audit_n / audit_s:>12.2f}")
    print(f"{'peer: ordinary run of the oracle agent':<44}{peer_n:>9}{peer_s:>9.1f}{peer_n / peer_s:>12.2f}")
    print(f"audit rollouts/s vs the ordinary run: {audit_n / audit_s / (peer_n / peer_s):.2f}x;"
          f" target audit < 60 s: {'met' if audit_s < 60 else 'MISSED'} ({audit_s:.1f} s)")

    rate = job.total / reverify_s
    print(f"\nRe-verification by replay (no agent), a background job on the same worker: {job.status},"
          f" {job.labelled} labelled, {len(job.skipped)} skipped")
    print(f"{'measure':<44}{'rollouts':>9}{'wall s':>9}{'rollouts/s':>12}")
    print(f"{'replay + verify + verifier labels':<44}{job.total:>9}{reverify_s:>9.1f}{rate:>12.1f}")
    print(f"re-verification vs re-running the agent (peer above): {rate / (peer_n / peer_s):.1f}x")

    if demo_rows:
        print(f"\nAudits of the demo packages, seeds {args.seeds}, one worker (-c {args.concurrency})")
        print(f"{'demo':<18}{'status':>9}{'rollouts':>10}{'wall s':>9}  lines that are not green")
        for name, status, count, wall, others in demo_rows:
            print(f"{name:<18}{status:>9}{count:>10}{wall:>9.1f}  {'; '.join(others) or '-'}")


def reverify_copies(audit, *, version, team, user, count: int):
    """`count` stored rollouts (copies of the audit's oracle rollouts, steps and all, in a run of a
    second version of the environment) re-verified by `version`'s verifier: the job and its wall time."""
    from environments import services as env_services
    from runs import services as run_services
    from runs.models import Rollout, Step
    from runs.quality import services
    from runs.quality.models import AuditRole

    oracle_run = audit.audit_runs.get(role=AuditRole.ORACLE).run
    source = env_services.version_commit(environment=version.environment, actor=user, message="copies", files=version.files)
    run = run_services.run_create(team=team, actor=user, version=source, agent=oracle_run.agent, task_ids=["t1"], seeds=[0],
                                  enqueue=False)
    run.rollouts.all().delete()
    sources = list(oracle_run.rollouts.order_by("id"))
    steps_of = {r.pk: list(Step.objects.filter(rollout=r).order_by("index").values("index", "action", "observation", "reward",
                                                                                 "terminated", "truncated", "info"))
                for r in sources}
    copies = []
    for i in range(count):
        rollout = sources[i % len(sources)]
        copies.append(Rollout(team=team, run=run, task_id=rollout.task_id, seed=rollout.seed, repeat=1 + i,
                              status=rollout.status, total_reward=rollout.total_reward, verifier_reward=rollout.verifier_reward,
                              step_count=rollout.step_count, initial_observation=rollout.initial_observation,
                              end_reason=rollout.end_reason))
    copies = Rollout.objects.bulk_create(copies, batch_size=1000)
    Step.objects.bulk_create(
        [Step(rollout=copy, **step) for i, copy in enumerate(copies) for step in steps_of[sources[i % len(sources)].pk]],
        batch_size=5000,
    )
    started = time.perf_counter()
    job = services.reverification_start(version=version, source=source, actor=user)

    def over():
        job.refresh_from_db()
        return job.is_over

    wait(over, 900, "the re-verification")
    return job, time.perf_counter() - started


def audit_demos(names: str, *, team, user, seeds) -> list[tuple]:
    """Audit each demo package (its dependencies built first) and wait for its report."""
    import tomllib

    from environments import services as env_services
    from environments.demo import demo_package_dirs, read_folder
    from environments.dependencies import services as dependency_services
    from runs.models import Rollout
    from runs.quality import services

    folders = [folder for folder in demo_package_dirs() if names == "all" or folder.name in names.split(",")]
    rows = []
    for folder in folders:
        files = read_folder(folder)
        slug = f"{folder.name.replace('_', '-')}-{uuid.uuid4().hex[:4]}"
        kind = tomllib.loads(files["environment.toml"]).get("kind", "python")
        env = env_services.environment_create(team=team, actor=user, name=slug, slug=slug, kind=kind, files=files)
        version = env_services.version_commit(environment=env, actor=user, message="bench", files=files)
        if version.dependency_environment_id:
            dependency_services.dependency_environment_build(depenv_id=version.dependency_environment_id)
            version.refresh_from_db()
        started = time.perf_counter()
        audit = services.audit_start(version=version, actor=user, seeds=seeds)

        def over():
            audit.refresh_from_db()
            return audit.is_over

        wait(over, 1800, f"the audit of {folder.name}")
        wall = time.perf_counter() - started
        others = [f"{line['level']} {line['check']}" for line in (audit.report or {}).get("lines", []) if line["level"] != "green"]
        if audit.report is None:
            others = [audit.message]
        rows.append((folder.name, audit.status, Rollout.objects.filter(run__audit_role__audit=audit).count(), wall, others))
    return rows


def run_status(run):
    run.refresh_from_db()
    return run.status


if __name__ == "__main__":
    main()
