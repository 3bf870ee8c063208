"""Celery tasks of the runs app: thin, id-taking, idempotent wrappers around the rollout lifecycle (runs/episodes/worker.py).

`execute_rollout` is acknowledged late: a worker that dies mid-rollout leaves the message to be
redelivered, and the service decides whether to restart, wait, or give up.
"""
import ast
import json
import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.db import connections

from .episodes import worker
from .episodes.host import end_orphaned_episodes
from .quality import tasks as quality_tasks  # noqa: F401 - the worker registers the quality lab's tasks too
from .episodes.status import EXECUTE_ROLLOUT, stale_after_s, teams_unpark_all
from .sandbox.uids import sweep_stale_sandboxes

logger = logging.getLogger(__name__)


@shared_task(name=EXECUTE_ROLLOUT, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def execute_rollout(rollout_id: int) -> str:
    """Run one rollout to its end. Safe to deliver twice: finished or live-owned rollouts are skipped."""
    # Celery's Django fix-up closes stale database connections around every task.
    return worker.rollout_execute(rollout_id=rollout_id)


@shared_task(ignore_result=True)
def recover_stale_rollouts() -> int:
    return len(worker.recover_stale_rollouts())


def rollouts_in_broker() -> set[int]:
    """Ids of the rollouts whose execute_rollout message the broker holds: waiting in the queue, or
    delivered and not yet acknowledged (running, or held by a worker for a countdown). Redis broker only."""
    from celery import current_app

    queue = current_app.conf.task_default_queue
    found: set[int] = set()
    with current_app.connection_for_read() as connection:
        client = connection.default_channel.client
        # kombu keeps one list per priority step: the plain name for the default, then name\x06\x16<n>.
        raw_messages = []
        for key in [queue] + [f"{queue}\x06\x16{step}" for step in range(1, 10)]:
            raw_messages.extend(client.lrange(key, 0, -1))
        unacked_key = current_app.conf.broker_transport_options.get("unacked_key", "unacked")
        raw_messages.extend(client.hvals(unacked_key))
    for raw in raw_messages:
        try:
            message = json.loads(raw)
            if isinstance(message, list):  # unacked entries are [message, exchange, routing key]
                message = message[0]
            headers = message.get("headers") or {}
            if headers.get("task") != execute_rollout.name:
                continue
            args = ast.literal_eval(headers.get("argsrepr") or "()")
            found.add(int(args[0]))
        except (ValueError, TypeError, KeyError, IndexError, SyntaxError, AttributeError):
            continue  # not one of ours
    return found


def _recover(when: str) -> None:
    try:
        recovered = worker.recover_stale_rollouts()
        if recovered:
            logger.warning("recovered stale rollouts %s: %s", when, recovered)
        requeued = worker.requeue_lost_rollouts(in_broker=rollouts_in_broker)
        if requeued:
            logger.warning("re-enqueued queued rollouts the broker had lost %s: %s", when, requeued)
        unparked = teams_unpark_all()
        if unparked:
            logger.info("sent parked rollouts whose team has a free slot again %s: %s", when, unparked)
        ended = end_orphaned_episodes()
        if ended:
            logger.warning("ended interactive rollouts whose episode host stopped %s: %s", when, ended)
    except Exception:  # noqa: BLE001 - recovery must never stop a worker
        logger.exception("could not recover stale rollouts")
    finally:
        # Pool processes forked later must not share this process's database socket.
        connections.close_all()


def _recover_periodically(stop: threading.Event) -> None:
    # A worker that dies while no other worker starts would otherwise leave its rollouts running
    # until the broker's visibility timeout (an hour) redelivers them.
    interval = max(stale_after_s(), 5.0)
    while not stop.wait(interval):
        _recover("periodically")


_stop_recovery = threading.Event()


@worker_ready.connect
def _recover_on_worker_start(sender=None, **kwargs):
    """A worker that starts after a crash puts its predecessor's running rollouts back in the queue,
    then keeps checking every ROLLOUT_STALE_AFTER_S for rollouts whose worker went silent."""
    _recover("on worker start")
    try:
        sweep_stale_sandboxes()
    except Exception:  # noqa: BLE001 - cleaning up after a dead worker must never stop a new one
        logger.exception("could not remove the sandboxes of dead workers")
    threading.Thread(target=_recover_periodically, args=(_stop_recovery,), name="recover-stale-rollouts", daemon=True).start()
