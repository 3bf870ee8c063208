"""The quality card's forms refuse bad input beside the field, with what was typed kept: the Audit form's
seeds (malformed, past int64) and the Re-verify form's source version, posted by htmx (the card swaps
itself) or without it (the version page comes back with the card in place), never a bare 400 page."""
import pytest
from django.urls import reverse

from runs.models import Run
from runs.quality.models import Audit, Reverification
from tests.conftest import login
from tests.quality.audits import passed_audit
from tests.review.conftest import ENV_PY
from tests.runs.rollout_factories import package_version

HTMX = {"HX-Request": "true"}


@pytest.fixture
def version(team, owner):
    return package_version(team, owner, "cardforms", ENV_PY)


def _url(name, team, **kw):
    return reverse(f"quality:{name}", kwargs={"team": team.slug, "slug": "cardforms", "number": 1, **kw})


@pytest.mark.django_db
@pytest.mark.parametrize("seeds, says", [
    ("0-4x", "&#x27;0-4x&#x27; is not a seed or a range of seeds"),
    ("4-0", "seed range &#x27;4-0&#x27; runs backwards"),
    ("0-99999999999999999999", "seed 99999999999999999999 is too large"),
    ("99999999999999999999", "seed 99999999999999999999 is too large"),  # a bare integer past int64: not the gate's page
])
@pytest.mark.parametrize("htmx", [False, True])
def test_audit_seeds_are_refused_beside_the_field_and_kept(team, owner, version, seeds, says, htmx):
    response = login(owner).post(_url("start", team), {"seeds": seeds}, headers=HTMX if htmx else {})
    page = response.content.decode()
    assert response.status_code == 400
    assert f'<small class="error" id="audit-seeds-error">Seeds: {says}' in page
    assert f'name="seeds" value="{seeds}"' in page and 'aria-invalid="true"' in page
    assert "The studio cannot take this input" not in page
    # htmx gets the card to swap in; a plain post gets the version page with the card in place.
    assert page.lstrip().startswith("<section") if htmx else ("<html" in page and 'id="quality-card"' in page)
    assert not Audit.objects.exists() and not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("source, says", [
    ("abc", "Give a version number of this environment, e.g. 1."),
    ("99999999999999999999", "No version has a number that large."),
    ("9", "cardforms has no version 9."),
])
def test_reverify_source_is_refused_beside_the_field_and_kept(team, owner, version, source, says):
    passed_audit(team, version)
    client = login(owner)
    for response in (client.get(_url("reverify_confirm", team), {"source": source}),
                     client.post(_url("reverify", team), {"source": source})):
        page = response.content.decode()
        assert response.status_code == 400
        assert f'<small class="error" id="reverify-source-error">{says}</small>' in page
        assert f'name="source" value="{source}"' in page and 'id="quality-card"' in page
    assert not Reverification.objects.exists()


@pytest.mark.django_db
def test_a_refused_reverification_of_an_unaudited_version_says_why_beside_the_source(team, owner, version):
    response = login(owner).get(_url("reverify_confirm", team), {"source": "1"})
    page = response.content.decode()
    assert response.status_code == 400 and 'id="reverify-source-error"' in page and "audit" in page
    assert 'name="source" value="1"' in page
