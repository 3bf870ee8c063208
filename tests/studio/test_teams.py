"""Accounts, teams, roles and API tokens as a user meets them."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from studio import services
from studio.models import ApiToken, Membership, Role, hash_token
from tests.conftest import PASSWORD, api_for, login


def test_signup_logs_in_and_starts_a_team(db):
    c = Client()
    r = c.post("/accounts/signup/", {"username": "newbie", "password1": PASSWORD, "password2": PASSWORD, "team_name": "Lab One"})
    assert r.status_code == 302
    assert r["Location"] == "/t/lab-one/environments/"
    m = Membership.objects.get(user__username="newbie")
    assert (m.team.name, m.role) == ("Lab One", Role.OWNER)
    assert c.get(r["Location"]).status_code == 200


def test_signup_with_mismatched_passwords_shows_the_error(db):
    r = Client().post("/accounts/signup/", {"username": "x", "password1": PASSWORD, "password2": "other-pass-123"})
    assert r.status_code == 200
    assert b"password fields didn" in r.content
    assert not get_user_model().objects.filter(username="x").exists()


def test_login_and_logout(owner):
    c = Client()
    r = c.post("/accounts/login/", {"username": "olivia", "password": PASSWORD})
    assert r.status_code == 302
    assert c.get("/").status_code == 302
    assert c.post("/accounts/logout/").status_code == 302
    assert c.get("/t/alpha/environments/")["Location"].startswith("/accounts/login/")


def test_owner_invites_an_existing_user_with_a_role(owner, team):
    newcomer = get_user_model().objects.create_user("nina", password=PASSWORD)
    r = login(owner).post("/t/alpha/members/invite/", {"username": "nina", "role": "reviewer"})
    assert r.status_code == 302
    assert Membership.objects.get(team=team, user=newcomer).role == Role.REVIEWER


def test_inviting_an_unknown_user_says_so(owner, team):
    r = login(owner).post("/t/alpha/members/invite/", {"username": "ghost", "role": "author"}, follow=True)
    assert b"No user named" in r.content


def test_only_owners_invite(author, team):
    get_user_model().objects.create_user("nina", password=PASSWORD)
    r = login(author).post("/t/alpha/members/invite/", {"username": "nina", "role": "owner"})
    assert r.status_code == 403
    assert not Membership.objects.filter(user__username="nina").exists()


def test_last_owner_cannot_be_demoted(owner, team):
    m = Membership.objects.get(user=owner)
    with pytest.raises(services.TeamError, match="at least one owner"):
        services.member_set_role(membership=m, role=Role.VIEWER, actor=owner)


def test_token_is_shown_once_and_stored_hashed(owner, team):
    c = login(owner)
    c.post("/t/alpha/tokens/new/", {"name": "trainer"})
    page = c.get("/t/alpha/settings/").content.decode()
    token = ApiToken.objects.get(name="trainer")
    raw = page.split('id="new-token" class="copyable">')[1].split("<")[0]
    assert raw.startswith("es_") and token.token_hash == hash_token(raw)
    assert raw not in str(ApiToken.objects.values_list())
    again = c.get("/t/alpha/settings/").content.decode()
    assert raw not in again


def test_revoked_token_stops_working(owner, team):
    token, raw = services.token_create(team=team, actor=owner, name="t")
    c = Client()
    assert c.get("/api/v1/environments", headers={"Authorization": f"Bearer {raw}"}).status_code == 200
    login(owner).post(f"/t/alpha/tokens/{token.pk}/revoke/")
    r = c.get("/api/v1/environments", headers={"Authorization": f"Bearer {raw}"})
    assert r.status_code == 401


def test_token_of_a_member_who_left_stops_working(owner, author, team):
    api = api_for(author, team)
    Membership.objects.filter(user=author).delete()
    assert api.get("/environments").status_code == 401


def test_outsider_gets_404_for_another_teams_pages(owner, outsider):
    c = login(outsider)
    for url in ["/t/alpha/environments/", "/t/alpha/settings/", "/t/alpha/environments/new/"]:
        assert c.get(url).status_code == 404, url
    assert c.post("/t/alpha/members/invite/", {"username": "oscar", "role": "owner"}).status_code == 404
