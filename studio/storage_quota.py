"""What a team stores, and its quota (settings.TEAM_STORAGE_QUOTA_MB): while a team is over it, new
runs and new environment versions are refused with the reason (413), so one team cannot fill the
database for every other. Stored bytes: its versions' files and tasks, and its rollouts' steps and
reset observations as the worker wrote them (Rollout.stored_bytes)."""
from django.conf import settings
from django.db import connection

from .errors import DomainError

MB = 1024 * 1024


class StorageQuotaExceeded(DomainError):
    status = 413


def team_stored_bytes(*, team_id: int) -> int:
    """One statement: the team's versions (their stored column sizes) and its rollouts' stored bytes."""
    from environments.models import Environment, EnvironmentVersion
    from runs.models import Rollout

    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT
                    (SELECT coalesce(sum(pg_column_size(v.files) + pg_column_size(v.tasks)), 0)
                     FROM {EnvironmentVersion._meta.db_table} v JOIN {Environment._meta.db_table} e ON e.id = v.environment_id
                     WHERE e.team_id = %s)
                  + (SELECT coalesce(sum(r.stored_bytes), 0) FROM {Rollout._meta.db_table} r WHERE r.team_id = %s)""",
            [team_id, team_id],
        )
        return int(cursor.fetchone()[0])


def storage_quota_check(*, team_id: int, what: str) -> None:
    """Raise StorageQuotaExceeded (naming `what` was refused) when the team stores more than its quota."""
    quota_mb = settings.TEAM_STORAGE_QUOTA_MB
    if not quota_mb:
        return
    stored = team_stored_bytes(team_id=team_id)
    if stored >= quota_mb * MB:
        raise StorageQuotaExceeded(
            f"{what} refused: this team stores {stored / MB:,.1f} MB, at or over its quota of {quota_mb:,} MB"
            " (TEAM_STORAGE_QUOTA_MB). An operator can raise the quota or remove old runs.",
            field="team",
        )
