"""Reads of environments and versions, always scoped to one team."""
from django.db.models import BooleanField, Case, Count, F, Max, OuterRef, Q, Subquery, Value, When
from django.shortcuts import get_object_or_404

from .models import Environment, EnvironmentVersion


# A version's files and tasks can be megabytes (a 19 MB tasks.jsonl is both a file and parsed tasks):
# reads that show a version, or a run or rollout of it, leave them in the database and ask for the
# part they show (version_paths, version_file, version_tasks_head). A deferred field still loads on
# access, so code that needs them (run creation, downloads, diffs) keeps working.
VERSION_CONTENT = ("files", "tasks")


def without_version_content(queryset, *relations: str):
    """`queryset` with each related version's files and tasks deferred: relations are lookup paths to a
    version ("environment_version", "run__environment_version"; "" for the queryset's own versions, the
    default)."""
    prefixes = [f"{relation}__" if relation else "" for relation in relations or ("",)]
    return queryset.defer(*(prefix + name for prefix in prefixes for name in VERSION_CONTENT))


def versions_for_team(*, team, kind: str | None = None):
    """The team's versions (for choosers), newest first within each environment, without their content."""
    versions = EnvironmentVersion.objects.filter(environment__team=team)
    if kind:
        versions = versions.filter(environment__kind=kind)
    return without_version_content(versions.select_related("environment").order_by("environment__name", "-number"))


def version_paths(version) -> list[str]:
    """The version's file paths, sorted, read inside the database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT jsonb_object_keys(files) FROM environments_environmentversion WHERE id = %s", [version.pk])
        return sorted(row[0] for row in cursor.fetchall())


def version_file(version, path: str, *, most_chars: int | None = None) -> tuple[str | None, int]:
    """One file's text (its first `most_chars` characters, when given) and its whole length; (None, 0)
    when the version has no such file."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT left(files ->> %s, %s), length(files ->> %s) FROM environments_environmentversion WHERE id = %s",
            [path, most_chars if most_chars is not None else 2**31 - 1, path, version.pk])
        row = cursor.fetchone()
    return (row[0], row[1] or 0) if row else (None, 0)


def version_code_files(version) -> dict[str, str]:
    """The version's Python files and environment.toml (what package_warnings reads), without its data files."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key, value FROM environments_environmentversion, jsonb_each_text(files)"
            " WHERE id = %s AND (key LIKE '%%.py' OR key = 'environment.toml')", [version.pk])
        return dict(cursor.fetchall())


def version_tasks_head(version, most: int) -> tuple[int, list[dict]]:
    """How many tasks the version has, and its first `most` tasks, read inside the database."""
    from django.db import connection

    if most <= 0:
        raise ValueError("most must be positive")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jsonb_array_length(tasks), jsonb_path_query_array(tasks, %s::jsonpath)"
            " FROM environments_environmentversion WHERE id = %s", [f"$[0 to {int(most) - 1}]", version.pk])
        count, head = cursor.fetchone()
    return count, _json(head) or []


def version_task(version, task_id: str) -> dict | None:
    """The version's task with this id (the first, if ids repeat), found inside the database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT task FROM environments_environmentversion, jsonb_array_elements(tasks) WITH ORDINALITY AS t(task, n)"
            " WHERE id = %s AND task ->> 'id' = %s ORDER BY n LIMIT 1", [version.pk, str(task_id)])
        row = cursor.fetchone()
    return _json(row[0]) if row else None


def _json(value):
    """A jsonb value from a raw query: Django's PostgreSQL backend hands jsonb over as text."""
    import json

    return json.loads(value) if isinstance(value, (str, bytes)) else value


def environments_for_team(*, team):
    return (
        Environment.objects.filter(team=team)
        .annotate(version_count=Count("versions"), latest_number=Max("versions__number"))
        .order_by("name")
    )


def environment_cards(*, team, q: str = "") -> list[Environment]:
    """The environments list: each with its version count, whether its draft has uncommitted changes,
    and its last run (`last_run`, with the run figures' counts and success rate, or None)."""
    from runs.figures import with_run_counts
    from runs.models import Run, RunPurpose

    # Evaluations only: an audit's runs, a session's episodes or a play are not what "last run" means.
    last_run = Run.objects.filter(environment_version__environment=OuterRef("pk"), purpose=RunPurpose.EVALUATION).order_by(
        "-created_at", "-id")
    envs = environments_for_team(team=team).annotate(
        last_run_id=Subquery(last_run.values("id")[:1]),
        uncommitted=Case(
            When(draft__based_on__isnull=True, then=Value(True)),
            When(draft__files=F("draft__based_on__files"), then=Value(False)),
            default=Value(True), output_field=BooleanField(),
        ),
    )
    if q:
        envs = envs.filter(Q(name__icontains=q) | Q(slug__icontains=q))
    envs = list(envs)
    runs = with_run_counts(without_version_content(
        Run.objects.select_related("environment_version__environment"), "environment_version",
    ).filter(pk__in=[e.last_run_id for e in envs if e.last_run_id]))
    by_id = {run.pk: run for run in runs}
    for env in envs:
        env.last_run = by_id.get(env.last_run_id)
    return envs


def environment_get(*, team, slug: str) -> Environment:
    """The team's environment, with its draft's revision; the draft's files load when asked for."""
    return get_object_or_404(Environment.objects.select_related("draft").defer("draft__files"), team=team, slug=slug)


def version_get(*, environment, number: int, content: bool = False) -> EnvironmentVersion:
    """The environment's version `number`. Without `content`, its files and tasks (and its parent's) are
    left in the database and load when first touched, which async code cannot do: callers that hand the
    version to an episode or a protocol ask for `content`."""
    versions = EnvironmentVersion.objects.select_related("author", "parent", "environment", "dependency_environment")
    versions = without_version_content(versions, "parent") if content else without_version_content(versions, "", "parent")
    return get_object_or_404(versions, environment=environment, number=number)


def version_by_label(*, team, label: str) -> EnvironmentVersion:
    """Resolve 'slug@N' (or 'slug' for the latest) within a team, with the version's files and tasks
    (runs, sessions and protocols start episodes from it)."""
    slug, _, number = label.partition("@")
    env = environment_get(team=team, slug=slug)
    if number:
        if not number.isdigit():
            from django.http import Http404

            raise Http404(f"Bad version number in {label!r}")
        return version_get(environment=env, number=int(number), content=True)
    version = env.versions.order_by("-number").first()
    if version is None:
        from django.http import Http404

        raise Http404(f"{slug} has no versions yet")
    return version
