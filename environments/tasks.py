"""Celery tasks of environments: building dependency environments (thin: ids in, a service call)."""
from celery import shared_task

from .dependencies import services as dependency_services


@shared_task(name=dependency_services.BUILD_DEPENDENCY_ENVIRONMENT, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def build_dependency_environment(depenv_id: int) -> str:
    """Idempotent: a set already built is a cache hit; versions already checked are skipped."""
    return dependency_services.dependency_environment_build(depenv_id=depenv_id)
