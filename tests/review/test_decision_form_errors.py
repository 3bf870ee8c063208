"""The review screen's decision form refuses bad input beside its field with what was typed kept: an
override value that is not a number or not finite, a rationale past its length, a missing rationale;
posted by htmx (the decision panel swaps itself) or without it (the page again), never a bare 400."""
import pytest

from runs.models import RewardLabel
from runs.review.services import MAX_RATIONALE_LENGTH
from tests.conftest import login

HTMX = {"HX-Request": "true"}


@pytest.fixture
def proposed(make_run):
    return make_run(rewards=[1.0], steps=1).rollouts.get()


@pytest.mark.django_db
@pytest.mark.parametrize("value, rationale, field, says", [
    ("zero", "because", "value", "The new value must be a finite number, e.g. 0 or 0.5."),
    ("1e999", "because", "value", "The new value must be a finite number"),
    ("nan", "because", "value", "The new value must be a finite number"),
    ("0.5", "", "rationale", "An override needs a rationale"),
    ("0.5", "x" * (MAX_RATIONALE_LENGTH + 1), "rationale", f"A rationale is at most {MAX_RATIONALE_LENGTH:,} characters"),
])
@pytest.mark.parametrize("htmx", [False, True])
def test_an_override_is_refused_beside_its_field_and_keeps_what_was_typed(reviewer, proposed, value, rationale, field,
                                                                          says, htmx):
    response = login(reviewer).post(f"/t/alpha/review/{proposed.pk}/decide/",
                                    {"decision": "overridden", "value": value, "rationale": rationale},
                                    headers=HTMX if htmx else {})
    page = response.content.decode()
    assert response.status_code == 400
    assert f'<small class="error" id="{field}-error">{says}' in page
    assert f'value="{value}"' in page and f">{rationale}</textarea>" in page
    assert '<div id="override-fields">' in page  # open, not hidden: the reviewer sees the field at fault
    if htmx:  # only the decision panel is swapped: the replay stays where the reviewer left it
        assert (response["HX-Retarget"], response["HX-Reselect"], response["HX-Reswap"]) == ("#decision", "#decision", "outerHTML")
    assert not RewardLabel.objects.filter(source="human").exists()


@pytest.mark.django_db
def test_a_decision_without_scripts_takes_the_button_it_was_sent_with(reviewer, proposed):
    # A form sent without scripts carries the empty hidden field and the button's own value.
    response = login(reviewer).post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": ["", "approved"]})
    assert response.status_code == 302
    assert RewardLabel.objects.filter(source="human", decision="approved").exists()
