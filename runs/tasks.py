"""Celery tasks of the runs app: thin, id-taking, idempotent wrappers around services.

`execute_rollout` is acknowledged late: a worker that dies mid-rollout leaves the message to be
redelivered, and the service decides whether to restart, wait, or give up.
"""
import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.db import connections

from . import services

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def execute_rollout(rollout_id: int) -> str:
    """Run one rollout to its end. Safe to deliver twice: finished or live-owned rollouts are skipped."""
    # Celery's Django fix-up closes stale database connections around every task.
    return services.rollout_execute(rollout_id=rollout_id)


@shared_task(ignore_result=True)
def recover_stale_rollouts() -> int:
    return len(services.recover_stale_rollouts())


def _recover(when: str) -> None:
    from .episodes.host import end_orphaned_episodes

    try:
        recovered = services.recover_stale_rollouts()
        if recovered:
            logger.warning("recovered stale rollouts %s: %s", when, recovered)
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
    interval = max(services.stale_after_s(), 5.0)
    while not stop.wait(interval):
        _recover("periodically")


_stop_recovery = threading.Event()


@worker_ready.connect
def _recover_on_worker_start(sender=None, **kwargs):
    """A worker that starts after a crash puts its predecessor's running rollouts back in the queue,
    then keeps checking every ROLLOUT_STALE_AFTER_S for rollouts whose worker went silent."""
    _recover("on worker start")
    threading.Thread(target=_recover_periodically, args=(_stop_recovery,), name="recover-stale-rollouts", daemon=True).start()
