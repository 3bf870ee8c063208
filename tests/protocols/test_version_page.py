"""The version page's Training loops card: a member who may run gets their OpenEnv URL (the API's
own), can revoke it; others see no card and cannot get one."""
import pytest

from runs.protocols.models import OpenEnvKey
from tests.conftest import api_for, login
from tests.runs.rollout_factories import demo_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def version(team, owner):
    return demo_version(team, owner, "inventory_tools")


def card_url(version, what=""):
    return f"/t/alpha/environments/{version.environment.slug}/versions/{version.number}/openenv/{what}"


def test_the_page_shows_the_same_url_as_the_api_and_revoking_replaces_it(owner, team, version):
    page = login(owner).get(f"/t/alpha/environments/{version.environment.slug}/versions/{version.number}/")
    assert b"Show my OpenEnv URL" in page.content
    client = login(owner)
    shown = client.post(card_url(version), HTTP_HX_REQUEST="true")
    api_url = api_for(owner, team).get(f"/environments/{version.environment.slug}/versions/1/openenv").json()["base_url"]
    assert shown.status_code == 200 and api_url.encode() in shown.content
    assert "/openenv/alpha/inventory-tools@1/k/oek" in api_url
    revoked = client.post(card_url(version, "revoke/"), HTTP_HX_REQUEST="true")
    assert b"is revoked" in revoked.content and api_url.encode() not in revoked.content
    assert OpenEnvKey.objects.filter(revoked_at__isnull=False).count() == 1 and OpenEnvKey.objects.active().count() == 1


def test_members_who_cannot_run_and_outsiders_get_no_url(owner, viewer, outsider, version):
    page = login(viewer).get(f"/t/alpha/environments/{version.environment.slug}/versions/{version.number}/")
    assert page.status_code == 200 and b"Show my OpenEnv URL" not in page.content
    assert login(viewer).post(card_url(version)).status_code == 403
    assert login(outsider).post(card_url(version)).status_code in (403, 404)
    assert login(owner).get(card_url(version)).status_code == 405  # POST only
    assert OpenEnvKey.objects.count() == 0
