"""Reads of environments and versions, always scoped to one team."""
from django.db.models import Count, Max
from django.shortcuts import get_object_or_404

from .models import Environment, EnvironmentVersion


def environments_for_team(*, team):
    return (
        Environment.objects.filter(team=team)
        .annotate(version_count=Count("versions"), latest_number=Max("versions__number"))
        .order_by("name")
    )


def environment_get(*, team, slug: str) -> Environment:
    return get_object_or_404(Environment.objects.select_related("draft"), team=team, slug=slug)


def version_get(*, environment, number: int) -> EnvironmentVersion:
    return get_object_or_404(
        EnvironmentVersion.objects.select_related("author", "parent", "environment"),
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
