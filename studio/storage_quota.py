"""What a team stores, and its quota (settings.TEAM_STORAGE_QUOTA_MB): while a team is over it, every
path that stores more is refused with the reason (413): new runs, audits and reruns, new versions and
uploads, drafts that grow, new episodes (sessions, OpenEnv and Gym resets, plays) and the steps of open
ones; what exists stays, and what shrinks (deleting, closing) is always allowed. One team cannot fill
the database for every other. Stored bytes: its versions' files and tasks, its drafts' files, and its
rollouts' steps and reset observations as they were written (Rollout.stored_bytes)."""
import threading
import time

from django.conf import settings
from django.db import connection

from .errors import DomainError

MB = 1024 * 1024


class StorageQuotaExceeded(DomainError):
    status = 413


def team_stored_bytes(*, team_id: int) -> int:
    """One statement: the team's versions (their stored column sizes) and its rollouts' stored bytes."""
    from environments.models import Draft, Environment, EnvironmentVersion
    from runs.models import Rollout

    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT
                    (SELECT coalesce(sum(pg_column_size(v.files) + pg_column_size(v.tasks)), 0)
                     FROM {EnvironmentVersion._meta.db_table} v JOIN {Environment._meta.db_table} e ON e.id = v.environment_id
                     WHERE e.team_id = %s)
                  + (SELECT coalesce(sum(pg_column_size(d.files)), 0)
                     FROM {Draft._meta.db_table} d JOIN {Environment._meta.db_table} e ON e.id = d.environment_id
                     WHERE e.team_id = %s)
                  + (SELECT coalesce(sum(r.stored_bytes), 0) FROM {Rollout._meta.db_table} r WHERE r.team_id = %s)""",
            [team_id, team_id, team_id],
        )
        return int(cursor.fetchone()[0])


def _refusal(*, team_id: int, what: str) -> StorageQuotaExceeded | None:
    quota_mb = settings.TEAM_STORAGE_QUOTA_MB
    if not quota_mb:
        return None
    stored = team_stored_bytes(team_id=team_id)
    if stored < quota_mb * MB:
        return None
    return StorageQuotaExceeded(
        f"{what} refused: this team stores {stored / MB:,.1f} MB, at or over its quota of {quota_mb:,} MB"
        " (TEAM_STORAGE_QUOTA_MB). An operator can raise the quota or remove old runs.",
        field="team",
    )


def storage_quota_check(*, team_id: int, what: str) -> None:
    """Raise StorageQuotaExceeded (naming `what` was refused) when the team stores more than its quota."""
    refusal = _refusal(team_id=team_id, what=what)
    if refusal is not None:
        raise refusal


# Steps of open episodes: the sum is read at most every RECHECK_S per team and process, so a training
# loop's step costs a dictionary lookup, and a team over its quota stores at most RECHECK_S more of steps.
RECHECK_S = 5.0
_checked: dict[int, tuple[float, StorageQuotaExceeded | None]] = {}
_checked_lock = threading.Lock()


def _recent(team_id: int) -> tuple[bool, StorageQuotaExceeded | None]:
    """(whether the team was checked in the last RECHECK_S, the refusal that check found)."""
    hit = _checked.get(team_id)
    if hit is None or hit[0] < time.monotonic():
        return False, None
    return True, hit[1]


def _recheck(team_id: int, what: str) -> StorageQuotaExceeded | None:
    refusal = _refusal(team_id=team_id, what=what)
    with _checked_lock:
        if len(_checked) > 10_000:
            _checked.clear()
        _checked[team_id] = (time.monotonic() + RECHECK_S, refusal)
    return refusal


def storage_quota_check_recent(*, team_id: int, what: str) -> None:
    """storage_quota_check for hot paths (steps): the team's sum as read within the last RECHECK_S."""
    if not settings.TEAM_STORAGE_QUOTA_MB:
        return
    fresh, refusal = _recent(team_id)
    if not fresh:
        refusal = _recheck(team_id, what)
    if refusal is not None:
        raise refusal


async def astorage_quota_check_recent(*, team_id: int, what: str) -> None:
    """storage_quota_check_recent on an event loop (the database is read in a thread when due)."""
    from asgiref.sync import sync_to_async

    if not settings.TEAM_STORAGE_QUOTA_MB:
        return
    fresh, refusal = _recent(team_id)
    if not fresh:
        refusal = await sync_to_async(_recheck)(team_id, what)
    if refusal is not None:
        raise refusal
