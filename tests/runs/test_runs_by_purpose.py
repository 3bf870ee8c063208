"""Runs by purpose (runs.models.RunPurpose): the runs list, the environments card's last run, the review queue
and GET /runs show evaluations by default; audits, sessions and plays are a filter away; an audit's probe and
determinism rollouts never wait for review; bad filters are refused naming the field."""
import datetime
import html

import pytest

from environments.selectors import environment_cards
from runs import services
from runs.models import ReviewState, RunPurpose
from runs.quality.models import Audit, AuditRole, AuditRun
from runs.review.selectors import QueueFilters, review_queue_count, review_queue_page
from runs.tasks import execute_rollout
from tests.conftest import api_for, login
from tests.runs.rollout_factories import demo_agent_code, demo_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def guess(team, owner):
    return demo_version(team, owner, "guess_number")


@pytest.fixture
def bisect(team, owner):
    return services.agent_create(team=team, actor=owner, name="bisect", kind="scripted", code=demo_agent_code("guess_number"))


def played(team, owner, version, agent, purpose=RunPurpose.EVALUATION, role=None, audit=None):
    """A run of one rollout (task t1, seed 0) of this purpose, executed here; `role`: the role it plays in `audit`."""
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1"], seeds=[0],
                              enqueue=False, purpose=purpose)
    if role is not None:
        AuditRun.objects.create(audit=audit, run=run, role=role, name=role)
    for rollout in run.rollouts.all():
        execute_rollout(rollout.pk)
    return run


@pytest.fixture
def mixed(team, owner, guess, bisect):
    """One run of each kind the symptoms named: an evaluation, then an audit's probe, determinism and oracle
    runs and a remote session, all newer than the evaluation."""
    probe = services.agent_create(team=team, actor=owner, name="probe-noop-1c0df267", kind="scripted",
                                  code=demo_agent_code("guess_number"))
    audit = Audit.objects.create(team=team, environment_version=guess, seeds=[0], created_by=owner)
    return {
        "evaluation": played(team, owner, guess, bisect),
        "probe": played(team, owner, guess, probe, RunPurpose.AUDIT, AuditRole.PROBE, audit),
        "determinism": played(team, owner, guess, probe, RunPurpose.AUDIT, AuditRole.DETERMINISM, audit),
        "oracle": played(team, owner, guess, bisect, RunPurpose.AUDIT, AuditRole.ORACLE, audit),
        "session": played(team, owner, guess, bisect, RunPurpose.SESSION),
    }


def run_ids_on_page(client, url):
    response = client.get(url)
    assert response.status_code == 200, response.content
    return response, [run.pk for run in response.context["runs"]]


def test_the_runs_list_shows_evaluations_unless_another_purpose_is_chosen(owner, team, mixed):
    client = login(owner)
    url = f"/t/{team.slug}/runs/"
    response, shown = run_ids_on_page(client, url)
    assert shown == [mixed["evaluation"].pk]
    page = response.content.decode()
    assert "Evaluation: <strong>1</strong>" in page and "Audit: <strong>3</strong>" in page and "all: <strong>5</strong>" in page
    _, shown = run_ids_on_page(client, url + "?purpose=audit")
    assert shown == [mixed["oracle"].pk, mixed["determinism"].pk, mixed["probe"].pk]
    _, shown = run_ids_on_page(client, url + "?purpose=all")
    assert len(shown) == 5
    # The htmx partial filters the same way (the form swaps just the rows).
    response = client.get(url + "?purpose=session", headers={"HX-Request": "true"})
    rows = response.content.decode()
    assert response.status_code == 200 and rows.lstrip().startswith('<div id="run-rows"')
    assert f">#{mixed['session'].pk}<" in rows and f">#{mixed['evaluation'].pk}<" not in rows


def test_the_runs_list_filters_by_agent_version_status_date_and_search(owner, team, mixed):
    client = login(owner)
    url = f"/t/{team.slug}/runs/?purpose=all"
    _, shown = run_ids_on_page(client, url + "&agent=probe-noop-1c0df267")
    assert shown == [mixed["determinism"].pk, mixed["probe"].pk]
    _, shown = run_ids_on_page(client, url + "&version=guess-number@1&status=queued")
    assert len(shown) == 5  # runs end on commit, which a test transaction never does
    _, shown = run_ids_on_page(client, url + "&version=guess-number@2")
    assert shown == []
    today = datetime.date.today().isoformat()
    _, shown = run_ids_on_page(client, url + f"&created_from={today}&created_to={today}")
    assert len(shown) == 5
    _, shown = run_ids_on_page(client, url + "&created_to=2001-01-01")
    assert shown == []
    _, shown = run_ids_on_page(client, url + "&q=noop")
    assert shown == [mixed["determinism"].pk, mixed["probe"].pk]
    _, shown = run_ids_on_page(client, url + f"&q=%23{mixed['oracle'].pk}")
    assert shown == [mixed["oracle"].pk]


@pytest.mark.parametrize("query,field,words", [
    ("purpose=audits", "purpose", "Unknown purpose 'audits'"),
    ("status=done", "status", "Unknown status 'done'"),
    ("agent=nobody", "agent", "No agent 'nobody'"),
    ("version=nope@1", "version", "No environment 'nope'"),
    ("version=guess-number@x", "version", "slug or slug@N"),
    ("created_from=yesterday", "created_from", "YYYY-MM-DD"),
    ("created_from=2026-02-02&created_to=2026-01-01", "created_to", "before created_from"),
])
def test_a_bad_filter_is_refused_naming_it_on_the_page_and_in_the_api(owner, team, mixed, query, field, words):
    response = login(owner).get(f"/t/{team.slug}/runs/?{query}")
    assert response.status_code == 400 and words in html.unescape(response.content.decode())
    api = api_for(owner, team).get(f"/runs?{query}")
    assert api.status_code == 400 and api.json()["field"] == field and words in api.json()["detail"]


def test_the_api_lists_runs_by_purpose_with_the_same_filters(owner, team, mixed):
    api = api_for(owner, team)
    listed = api.get("/runs").json()
    assert [(r["id"], r["purpose"]) for r in listed] == [(mixed["evaluation"].pk, "evaluation")]
    assert {r["id"] for r in api.get("/runs", {"purpose": "all"}).json()} == {run.pk for run in mixed.values()}
    listed = api.get("/runs", {"purpose": "audit", "agent": "bisect"}).json()
    assert [r["id"] for r in listed] == [mixed["oracle"].pk]
    first = api.get("/runs", {"purpose": "audit", "limit": 1}).json()
    after = api.get("/runs", {"purpose": "audit", "before": first[0]["id"]}).json()
    assert [r["id"] for r in first + after] == [mixed["oracle"].pk, mixed["determinism"].pk, mixed["probe"].pk]
    assert api.get("/runs", {"q": "noop"}).json() == []  # probes are audits, not evaluations


def test_the_environments_card_last_run_is_the_last_evaluation(team, mixed):
    (card,) = environment_cards(team=team)
    assert card.last_run.pk == mixed["evaluation"].pk


def test_probe_and_determinism_rollouts_never_wait_for_review(owner, team, mixed):
    probe_rollouts = [r.pk for key in ("probe", "determinism") for r in mixed[key].rollouts.all()]
    assert ReviewState.objects.filter(rollout_id__in=probe_rollouts, has_proposal=True, open=False).count() == 2
    for purpose in (RunPurpose.AUDIT, None):
        shown = [r.pk for r in review_queue_page(team=team, reviewer=owner, filters=QueueFilters(purpose=purpose))]
        assert not set(shown) & set(probe_rollouts)
    # Naming the run does not bring them back either.
    assert review_queue_page(team=team, reviewer=owner, filters=QueueFilters(run_id=mixed["probe"].pk)) == []


def test_the_review_queue_shows_evaluations_unless_asked(owner, team, mixed):
    ids = lambda run: [r.pk for r in run.rollouts.all()]  # noqa: E731
    assert [r.pk for r in review_queue_page(team=team, reviewer=owner)] == ids(mixed["evaluation"])
    assert review_queue_count(team=team, reviewer=owner) == 1
    session = review_queue_page(team=team, reviewer=owner, filters=QueueFilters(purpose=RunPurpose.SESSION))
    assert [r.pk for r in session] == ids(mixed["session"])
    audit = review_queue_page(team=team, reviewer=owner, filters=QueueFilters(purpose=RunPurpose.AUDIT))
    assert [r.pk for r in audit] == ids(mixed["oracle"])
    everything = review_queue_page(team=team, reviewer=owner, filters=QueueFilters(purpose=None))
    assert len(everything) == 3
    # Through the page and the API, with a bad purpose named.
    page = login(owner).get(f"/t/{team.slug}/review/?purpose=session")
    assert [r.pk for r in page.context["items"]] == ids(mixed["session"])
    assert "purpose must be one of" in login(owner).get(f"/t/{team.slug}/review/?purpose=nope").content.decode()
    api = api_for(owner, team)
    assert [item["id"] for item in api.get("/review/queue").json()["items"]] == ids(mixed["evaluation"])
    assert len(api.get("/review/queue", {"purpose": "all"}).json()["items"]) == 3
    bad = api.get("/review/queue", {"purpose": "nope"})
    assert bad.status_code == 422 and bad.json()["field"] == "purpose"


def test_audit_difficulty_reads_evaluations_and_the_oracle_only(guess, mixed):
    from runs.quality.report import version_rows

    runs = {row["id"]: row for row in version_rows(version=guess)}
    expected = {r.pk for key in ("evaluation", "oracle") for r in mixed[key].rollouts.all()}
    assert set(runs) == expected  # no probe, determinism pair or session rollout
