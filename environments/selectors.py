"""Reads of environments and versions, always scoped to one team."""
from django.db.models import BooleanField, Case, Count, F, Max, OuterRef, Q, Subquery, Value, When
from django.shortcuts import get_object_or_404

from .models import Environment, EnvironmentVersion


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
    from runs.models import Run

    last_run = Run.objects.filter(environment_version__environment=OuterRef("pk")).order_by("-created_at", "-id")
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
    runs = with_run_counts(Run.objects.select_related("environment_version__environment").filter(pk__in=[e.last_run_id for e in envs if e.last_run_id]))
    by_id = {run.pk: run for run in runs}
    for env in envs:
        env.last_run = by_id.get(env.last_run_id)
    return envs


def environment_get(*, team, slug: str) -> Environment:
    return get_object_or_404(Environment.objects.select_related("draft"), team=team, slug=slug)


def version_get(*, environment, number: int) -> EnvironmentVersion:
    return get_object_or_404(
        EnvironmentVersion.objects.select_related("author", "parent", "environment", "dependency_environment"),
        environment=environment,
        number=number,
    )


def version_by_label(*, team, label: str) -> EnvironmentVersion:
    """Resolve 'slug@N' (or 'slug' for the latest) within a team."""
    slug, _, number = label.partition("@")
    env = environment_get(team=team, slug=slug)
    if number:
        if not number.isdigit():
            from django.http import Http404

            raise Http404(f"Bad version number in {label!r}")
        return version_get(environment=env, number=int(number))
    version = env.versions.order_by("-number").first()
    if version is None:
        from django.http import Http404

        raise Http404(f"{slug} has no versions yet")
    return version
