"""Unicode names give readable slugs: transliterated, not letters dropped."""
import pytest

from environments import services as env_services
from studio import services as studio_services
from studio.slugs import slug_from


@pytest.mark.parametrize("name,slug", [
    ("Café Größe", "cafe-groesse"),
    ("Привет мир", "privet-mir"),
    ("Ελληνικά", "ellinika"),
    ("Łódź ✓ naïve", "lodz-naive"),
    ("Straße 42!", "strasse-42"),
    ("漢字", "env"),
])
def test_names_transliterate_to_readable_slugs(name, slug):
    assert slug_from(name, fallback="env") == slug


def test_environments_and_teams_get_transliterated_slugs(team, owner):
    env = env_services.environment_create(team=team, actor=owner, name="Größe Übung")
    assert env.slug == "groesse-uebung"
    assert studio_services.team_create(name="Équipe Ørsted", actor=owner).slug == "equipe-orsted"
