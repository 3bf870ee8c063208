"""A session run and its episodes at the same moment, in real concurrent transactions (each thread its own
database connection): an episode that ends while another joins the run, and two that end together. The run
is running while any episode is open and finished once the last one has ended, whatever the interleaving."""
import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from runs.episodes.interactive import session_run_for
from runs.episodes.service import rollout_end
from runs.models import AgentKind, Rollout, RolloutStatus, Run, RunStatus
from runs.services import agent_get_or_create
from studio.models import Team
from tests.review.conftest import ENV_PY
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(team, owner):
    """A session run of one credential with one open episode, as episode_open leaves them."""
    version = package_version(team, owner, "races", ENV_PY, tasks=[{"id": "t1"}, {"id": "t2"}])
    agent = agent_get_or_create(team=team, actor=owner, name="remote", kind=AgentKind.REMOTE)

    def join(task_id="t1", seed=0) -> Rollout:
        """episode_open's transaction: the team's row, the session run's row (session_run_for), the rollout."""
        Team.objects.select_for_update().filter(pk=team.pk).first()
        run = session_run_for(team=team, actor=owner, version=version, agent=agent, credential="token:1", run_name="",
                              task_id=task_id, seed=seed, now=timezone.now())
        now = timezone.now()
        return Rollout.objects.create(team=team, run=run, task_id=task_id, seed=seed, status=RolloutStatus.RUNNING,
                                      attempts=1, started_at=now, heartbeat_at=now)

    with transaction.atomic():
        first = join()
    return join, first


def end(rollout: Rollout) -> None:
    assert rollout_end(rollout=Rollout.objects.get(pk=rollout.pk), status=RolloutStatus.SUCCEEDED, error="",
                       end_reason="closed")


def in_thread(target, *args) -> threading.Thread:
    """`target` in a thread of its own with its own connection (closed when it returns); errors re-raised by join."""
    errors = []

    def run():
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    original_join = thread.join

    def join(timeout=30):
        original_join(timeout)
        assert not thread.is_alive(), "the thread is stuck"
        if errors:
            raise errors[0]

    thread.join = join
    return thread


def waiting_on_a_lock(count: int = 1, timeout: float = 10) -> None:
    """Until `count` other backends of this database wait on a lock (the interleaving the test sets up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)
    raise AssertionError("no backend came to wait on the lock")


def test_an_episode_ending_while_another_joins_leaves_the_run_running(session):
    join, first = session
    joined, commit = threading.Event(), threading.Event()
    second = {}

    def joining():
        with transaction.atomic():
            second["rollout"] = join(task_id="t2", seed=7)
            joined.set()
            assert commit.wait(10)  # the joiner holds the run's row until the ending episode waits for it

    joiner = in_thread(joining)
    assert joined.wait(10)
    ender = in_thread(end, first)  # its rollout's end commits, then the run's finish check waits for the joiner
    waiting_on_a_lock()
    commit.set()
    joiner.join()
    ender.join()
    run = Run.objects.get(pk=first.run_id)
    assert second["rollout"].run_id == run.pk
    assert Rollout.objects.get(pk=second["rollout"].pk).status == RolloutStatus.RUNNING
    assert (run.status, run.finished_at) == (RunStatus.RUNNING, None), "finished with an episode open"
    end(second["rollout"])
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED and run.finished_at is not None


def test_two_episodes_ending_together_finish_the_run(session):
    join, first = session
    with transaction.atomic():
        second = join(task_id="t2", seed=7)
    barrier = threading.Barrier(2)

    def ending(rollout):
        barrier.wait(10)
        end(rollout)

    threads = [in_thread(ending, rollout) for rollout in (first, second)]
    for thread in threads:
        thread.join()
    run = Run.objects.get(pk=first.run_id)
    assert run.status == RunStatus.FINISHED and run.finished_at is not None
