"""Dependency environments of versions: attached at commit, built by a Celery task, checked, and
turned into the sandbox's import path. The page, the API, run creation and the sandbox all read a
version's state through these functions."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from studio.celery import task_send_on_commit
from studio.errors import DomainError

from .. import package
from ..models import DependencyEnvironment, DependencyStatus, EnvironmentVersion
from . import builder, plugins

# The build task, sent by name (environments/tasks.py registers it).
BUILD_DEPENDENCY_ENVIRONMENT = "environments.build_dependency_environment"

logger = logging.getLogger(__name__)


class DependenciesNotReady(DomainError):
    """A version whose dependency environment is not built (yet, or ever) cannot run."""

    status = 409

    def __init__(self, message: str):
        super().__init__(message, field="version")


# -- configuration ------------------------------------------------------------------------------------


def depenv_root() -> Path:
    return Path(settings.DEPENV_ROOT)


def sandbox_python() -> str:
    return settings.SANDBOX_PYTHON


def index_config() -> builder.IndexConfig:
    """DEPENV_INDEX_URL alone when set, else pip's own configuration; DEPENV_FIND_LINKS on top."""
    if settings.DEPENV_INDEX_URL:
        config = builder.IndexConfig(index_url=settings.DEPENV_INDEX_URL)
    else:
        config = _pip_index_config()
    if settings.DEPENV_FIND_LINKS:
        config = builder.IndexConfig(**{**config.__dict__, "find_links": (*config.find_links, *settings.DEPENV_FIND_LINKS)})
    return config


_pip_config_cache: list[builder.IndexConfig] = []


def _pip_index_config() -> builder.IndexConfig:
    if not _pip_config_cache:
        _pip_config_cache.append(builder.pip_index_config())
    return _pip_config_cache[0]


def default_sdk_path() -> str:
    from runs.sandbox.process import SDK_PATH  # noqa: PLC0415 - the runner's side of the boundary

    return str(SDK_PATH)


def default_python_path() -> tuple[str, ...]:
    from runs.sandbox import default_python_path as studio_path  # noqa: PLC0415

    return tuple(studio_path())


# -- commit -------------------------------------------------------------------------------------------


def requirement_set_of(files: dict) -> builder.RequirementSet | None:
    """The package's requirement set, None when it declares no dependencies (it runs on the studio's)."""
    requirements = package.dependencies_of(files)
    if not requirements:
        return None
    return builder.requirement_set(requirements, python=sandbox_python())


class TooManyChecks(DomainError):
    status = 429


CHECK_LOCK_SPACE = 0x5EC0  # first key of the advisory locks that count a team's running checks


@contextlib.contextmanager
def team_check_slot(*, team_id: int):
    """One of the team's ENTRYPOINT_CHECKS_PER_TEAM slots for a check sandbox, held while the check
    runs (PostgreSQL advisory locks: every web process counts the same, and a process that dies lets
    go); TooManyChecks when all are taken."""
    slots = max(1, int(settings.ENTRYPOINT_CHECKS_PER_TEAM))
    with connection.cursor() as cursor:
        for slot in range(slots):
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [CHECK_LOCK_SPACE + slot, team_id])
            if cursor.fetchone()[0]:
                break
        else:
            raise TooManyChecks(
                f"Your team already runs {slots} entrypoint checks at once (ENTRYPOINT_CHECKS_PER_TEAM);"
                " commit again once one has finished (a check takes at most"
                f" {plugins.CHECK_DEADLINE_S:g} s).", field="entrypoint",
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [CHECK_LOCK_SPACE + slot, team_id])


def entrypoint_check_before_commit(*, team_id: int, files: dict, manifest: dict, tasks: list) -> plugins.EntrypointCheck | None:
    """The entrypoint check, when it can run at commit time: a plugin id of a package without
    dependencies (in the studio's own path), or a checked id whose set is already built on this host.
    None: nothing to check now (the build task checks the version once its set is built)."""
    requirement_set = requirement_set_of(files)
    if not plugins.needs_check(manifest, has_dependencies=requirement_set is not None):
        return None
    if requirement_set is None:
        python_path = default_python_path()
    else:
        site = builder.built_path(depenv_root(), requirement_set.sha256)
        if site is None or not DependencyEnvironment.objects.filter(
            sha256=requirement_set.sha256, status=DependencyStatus.READY
        ).exists():
            return None
        python_path = (default_sdk_path(), str(site))
    with team_check_slot(team_id=team_id):
        return plugins.check_entrypoint(files=files, manifest=manifest, tasks=tasks, python_path=python_path,
                                        sandbox_python=sandbox_python())


def dependency_environment_attach(*, files: dict, content_hash: str, checked: bool) -> DependencyEnvironment | None:
    """Inside the commit's transaction: the row of the package's requirement set (new ones start
    `building`; a failed one is tried again), its build queued once the commit is stored.
    `checked`: the entrypoint already passed entrypoint_check_before_commit in the built set."""
    requirement_set = requirement_set_of(files)
    if requirement_set is None:
        return None
    depenv, _created = DependencyEnvironment.objects.get_or_create(
        sha256=requirement_set.sha256,
        defaults={
            "requirements": list(requirement_set.requirements),
            "base_requirements": list(requirement_set.base),
            "python": requirement_set.python,
        },
    )
    depenv = DependencyEnvironment.objects.select_for_update().get(pk=depenv.pk)
    if depenv.status == DependencyStatus.FAILED:
        # The registry may be back, a release may have appeared: a new commit tries the set again.
        depenv.status, depenv.error = DependencyStatus.BUILDING, ""
        depenv.save(update_fields=["status", "error", "updated_at"])
    if checked:
        _record_check(depenv.pk, content_hash, plugins.EntrypointCheck(True, "checked at commit"))
    if depenv.status != DependencyStatus.READY or not checked:
        task_send_on_commit(BUILD_DEPENDENCY_ENVIRONMENT, depenv.pk)
    return depenv


# -- building (the Celery task's service) -------------------------------------------------------------


def dependency_environment_build(*, depenv_id: int) -> str:
    """Build the set (a cache hit when it is on disk already), record the outcome and log, then check
    the entrypoint of every version using it. Idempotent: safe to run twice, or after a crash."""
    depenv = DependencyEnvironment.objects.filter(pk=depenv_id).first()
    if depenv is None:
        return "gone"
    requirement_set = builder.RequirementSet(
        requirements=tuple(depenv.requirements), base=tuple(depenv.base_requirements), python=depenv.python
    )
    if depenv.status != DependencyStatus.READY or builder.built_path(depenv_root(), depenv.sha256) is None:
        DependencyEnvironment.objects.filter(pk=depenv_id).update(
            status=DependencyStatus.BUILDING, started_at=timezone.now(), attempts=depenv.attempts + 1,
            updated_at=timezone.now(),
        )
        try:
            result = builder.build(requirement_set, root=depenv_root(), python=sandbox_python(), index=index_config(),
                                   timeout_s=settings.DEPENV_BUILD_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a build must end as `failed` with its reason, never stay `building`
            logger.exception("dependency environment %s: the build crashed", depenv.sha256)
            result = builder.BuildResult(False, depenv_root() / depenv.sha256, "", error=f"the build crashed: {exc}")
        fields = {
            "status": DependencyStatus.READY if result.ok else DependencyStatus.FAILED,
            "log": result.log,
            "error": "" if result.ok else explain_error(result.error, requirement_set),
            "finished_at": timezone.now(),
            "updated_at": timezone.now(),
        }
        if not result.cached:
            fields["build_seconds"] = round(result.seconds, 3)
        DependencyEnvironment.objects.filter(pk=depenv_id).update(**fields)
        if not result.ok:
            return "failed"
    dependency_environment_check_versions(depenv_id=depenv_id)
    return "ready"


def explain_error(error: str, requirement_set: builder.RequirementSet) -> str:
    """uv's reason, plus where the studio's own pins come from when they take part in a conflict."""
    names = [base.split("==")[0] for base in requirement_set.base]
    if any(f"{name}==" in error for name in names) and "unsatisfiable" in error:
        error += (f"\n(The studio pins {', '.join(requirement_set.base)}: the SDK and the sandbox runner use them; "
                  "declare versions compatible with these.)")
    if "no usable wheels" in error:
        error += (f"\n(The studio installs wheels only and never runs a package's build code: pick a release that "
                  f"publishes a wheel for Python {requirement_set.python}.)")
    return error


def dependency_environment_check_versions(*, depenv_id: int) -> None:
    """Check the entrypoint of each version of this set that needs it and has no result yet."""
    depenv = DependencyEnvironment.objects.get(pk=depenv_id)
    site = builder.built_path(depenv_root(), depenv.sha256)
    if site is None:
        return
    seen = set(depenv.entrypoint_checks)
    for version in EnvironmentVersion.objects.filter(dependency_environment_id=depenv_id).order_by("pk"):
        if version.content_hash in seen or not plugins.needs_check(version.manifest, has_dependencies=True):
            continue
        seen.add(version.content_hash)
        result = plugins.check_entrypoint(
            files=version.files, manifest=version.manifest, tasks=version.tasks,
            python_path=(default_sdk_path(), str(site)), sandbox_python=sandbox_python(),
        )
        _record_check(depenv_id, version.content_hash, result)


def _record_check(depenv_id: int, content_hash: str, result: plugins.EntrypointCheck) -> None:
    with transaction.atomic():
        depenv = DependencyEnvironment.objects.select_for_update().get(pk=depenv_id)
        depenv.entrypoint_checks = {**depenv.entrypoint_checks, content_hash: result.as_dict()}
        depenv.save(update_fields=["entrypoint_checks", "updated_at"])


# -- reading: the state of a version, its refusal, its import path ------------------------------------


def version_dependencies(version: EnvironmentVersion) -> dict | None:
    """What the version page and the API show: None for a version without dependencies."""
    depenv = version.dependency_environment
    if depenv is None:
        return None
    check = depenv.entrypoint_checks.get(version.content_hash)
    needs = plugins.needs_check(version.manifest, has_dependencies=True)
    return {
        "sha256": depenv.sha256,
        "requirements": depenv.requirements,
        "base_requirements": depenv.base_requirements,
        "python": depenv.python,
        "status": depenv.status,
        "error": depenv.error,
        "log": depenv.log,
        "build_seconds": depenv.build_seconds,
        "started_at": depenv.started_at,
        "finished_at": depenv.finished_at,
        "entrypoint_check": check if needs else None,
        "entrypoint_check_pending": needs and check is None,
        "refusal": version_run_refusal(version),
    }


def version_run_refusal(version: EnvironmentVersion) -> str | None:
    """Why the version cannot run now (None: it can)."""
    depenv = version.dependency_environment
    if depenv is None:
        return None
    if depenv.status == DependencyStatus.FAILED:
        first = (depenv.error or "no reason recorded").strip().splitlines()[0]
        return f"{version.label} cannot run: its dependencies failed to build ({first}). Fix them and commit a new version."
    if depenv.status == DependencyStatus.BUILDING:
        return f"{version.label} cannot run yet: its dependencies are still being built; its page shows the progress."
    if plugins.needs_check(version.manifest, has_dependencies=True):
        check = depenv.entrypoint_checks.get(version.content_hash)
        if check is None:
            return f"{version.label} cannot run yet: its entrypoint is still being checked in its dependency environment."
        if not check.get("ok"):
            return f"{version.label} cannot run: {check.get('message')}"
    return None


def ensure_version_runnable(version: EnvironmentVersion) -> None:
    """Raise DependenciesNotReady (a clear 409) unless the version can run."""
    reason = version_run_refusal(version)
    if reason:
        raise DependenciesNotReady(reason)


def version_python_path(version: EnvironmentVersion) -> tuple[str, ...] | None:
    """The sandbox's import path for the version: the SDK then its dependency environment; None for a
    version without dependencies (the studio's default path). A set built on another host is built
    here too (under the same lock, once) before its first sandbox starts."""
    depenv = version.dependency_environment
    if depenv is None:
        return None
    site = builder.built_path(depenv_root(), depenv.sha256)
    if site is None:
        ensure_version_runnable(version)
        requirement_set = builder.RequirementSet(
            requirements=tuple(depenv.requirements), base=tuple(depenv.base_requirements), python=depenv.python
        )
        result = builder.build(requirement_set, root=depenv_root(), python=sandbox_python(), index=index_config(),
                               timeout_s=settings.DEPENV_BUILD_TIMEOUT_S)
        if not result.ok:
            raise DependenciesNotReady(f"{version.label}: its dependencies could not be built on this host: {result.error}")
        site = result.path
    return (default_sdk_path(), str(site))
