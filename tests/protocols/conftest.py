"""A running studio (uvicorn + an episode host) and the URLs its protocols give a member."""
import httpx
import pytest

from studio import services as studio_services
from tests.processes import asgi_server, episode_host, episode_host_prefix  # noqa: F401
from tests.runs.rollout_factories import demo_version


@pytest.fixture
def studio(episode_host, asgi_server):  # noqa: F811 - the host first: the server reaches it
    return asgi_server


@pytest.fixture
def token_of(team):
    def make(user, for_team=None):
        _, raw = studio_services.token_create(team=for_team or team, actor=user, name="protocols")
        return raw

    return make


@pytest.fixture
def openenv_of(studio, token_of):
    """openenv_of(version, user) -> the JSON of GET .../versions/{n}/openenv for that member."""

    def get(version, user):
        response = httpx.get(
            f"{studio}/api/v1/environments/{version.environment.slug}/versions/{version.number}/openenv",
            headers={"Authorization": f"Bearer {token_of(user)}"},
        )
        assert response.status_code == 200, response.text
        return response.json()

    return get


@pytest.fixture
def inventory(team, owner):
    return demo_version(team, owner, "inventory_tools")


@pytest.fixture
def frozen_lake(team, owner):
    return demo_version(team, owner, "frozen_lake")
