"""The Celery app; workers run rollouts. Tasks live in each app's tasks.py."""
import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def keep_worker_database_connections() -> None:
    """A worker's connections live WORKER_DB_CONN_MAX_AGE seconds instead of one task (Celery's Django
    fix-up closes them around every task only once they are older, or broken). Not with a pool,
    which keeps connections itself and refuses CONN_MAX_AGE."""
    from django.conf import settings
    from django.db import connections

    database = connections.settings["default"]
    if not (database.get("OPTIONS") or {}).get("pool"):
        database["CONN_MAX_AGE"] = settings.WORKER_DB_CONN_MAX_AGE


_worker_slots: int | None = None


def worker_slots() -> int:
    """How many rollouts this worker runs at once (its concurrency; Celery's default outside a worker)."""
    return _worker_slots or os.cpu_count() or 1


@worker_init.connect
def _worker_start(sender=None, **kwargs):
    global _worker_slots
    _worker_slots = getattr(sender, "concurrency", None)
    keep_worker_database_connections()  # before the pool forks: its processes inherit both


def task_send(name: str, *args, countdown: float | None = None) -> None:
    """Send the task called `name` to the workers: the sender names it, never imports the task module
    (which imports the services that send it). Raises kombu's OperationalError when the broker is away."""
    app.send_task(name, args=args, countdown=countdown)


def task_send_on_commit(name: str, *args) -> None:
    """task_send once the current transaction commits (at once outside one)."""
    from django.db import transaction

    transaction.on_commit(lambda: task_send(name, *args))
