"""The cast every test can use: an owner and a reviewer of one team, an outsider from another."""
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from environments import services as env_services
from studio import services as studio_services
from studio.models import Membership, Role, Team

PASSWORD = "a-long-test-password-1"


def pytest_configure(config):
    """A transactional test's tables are emptied by one TRUNCATE of every table. A process the test
    started (a page still polling, a worker, an episode host) may be reading two of them at that moment:
    PostgreSQL then ends one of the two as a deadlock, sometimes the TRUNCATE, and the next test would
    start on the last one's rows. The emptying is retried (it rolled back whole), at most three times."""
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    empty_tables = TransactionTestCase._fixture_teardown

    def empty_tables_again_after_a_deadlock(self):
        for attempt in range(3):
            try:
                return empty_tables(self)
            except (CommandError, OperationalError) as exc:
                if attempt == 2 or "deadlock detected" not in f"{exc} {exc.__cause__}":
                    raise
                time.sleep(0.5)

    TransactionTestCase._fixture_teardown = empty_tables_again_after_a_deadlock


def pytest_collection_modifyitems(config, items):
    """Browser tests run last: while Playwright is open its event loop occupies the main thread."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


def make_user(username):
    return get_user_model().objects.create_user(username=username, password=PASSWORD)


@pytest.fixture
def team(db):
    return Team.objects.create(slug="alpha", name="Alpha")


@pytest.fixture
def owner(team):
    user = make_user("olivia")
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    return user


@pytest.fixture
def author(team):
    user = make_user("arthur")
    Membership.objects.create(team=team, user=user, role=Role.AUTHOR)
    return user


@pytest.fixture
def reviewer(team):
    user = make_user("rita")
    Membership.objects.create(team=team, user=user, role=Role.REVIEWER)
    return user


@pytest.fixture
def viewer(team):
    user = make_user("victor")
    Membership.objects.create(team=team, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def other_team(db):
    return Team.objects.create(slug="bravo", name="Bravo")


@pytest.fixture
def outsider(other_team):
    user = make_user("oscar")
    Membership.objects.create(team=other_team, user=user, role=Role.OWNER)
    return user


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


class ApiClient:
    """A test client that sends a bearer token with every request."""

    def __init__(self, raw):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {raw}"} if raw else {}

    def _call(self, method, path, data=None, **kw):
        fn = getattr(self.client, method)
        if "content_type" in kw and kw["content_type"] is None:
            del kw["content_type"]  # multipart form, for uploads
        elif data is not None and method != "get":
            kw.setdefault("content_type", "application/json")
        return fn("/api/v1" + path, data, headers=self.headers, **kw)

    def get(self, path, data=None, **kw):
        return self._call("get", path, data, **kw)

    def post(self, path, data=None, **kw):
        return self._call("post", path, data, **kw)

    def put(self, path, data=None, **kw):
        return self._call("put", path, data, **kw)

    def patch(self, path, data=None, **kw):
        return self._call("patch", path, data, **kw)

    def delete(self, path, data=None, **kw):
        return self.client.delete("/api/v1" + path, headers=self.headers, **kw)


def api_for(user, team) -> ApiClient:
    _, raw = studio_services.token_create(team=team, actor=user, name="test")
    return ApiClient(raw)


@pytest.fixture
def owner_api(owner, team):
    return api_for(owner, team)


@pytest.fixture
def outsider_api(outsider, other_team):
    return api_for(outsider, other_team)


@pytest.fixture
def environment(team, owner):
    return env_services.environment_create(team=team, actor=owner, name="Counter", slug="counter")
