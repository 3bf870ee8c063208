"""Hostile input gets a 4xx naming the field, never a 500 and never a process that grows first:
seeds, offsets, run limits, NUL bytes, surrogates, NaN, huge integers, deep nesting."""
import json
import tracemalloc

import pytest

from runs.models import Run
from runs.seeds import parse_seeds
from tests.conftest import login
from tests.runs.rollout_factories import package_version

ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, True, False, {}
"""


@pytest.fixture
def version(team, owner):
    return package_version(team, owner, "inputs", ENV_PY)


def run_body(**changes):
    return {"version": "inputs@1", "agent": "random", "seeds": "0", **changes}


# -- seeds -----------------------------------------------------------------------------------------


def test_many_disjoint_seed_ranges_are_refused_before_they_are_expanded():
    # 15 KB of ranges of 9,999 seeds each: ~150 million seeds if expanded (the old parser grew by ~600 MB).
    text = ",".join(f"{start}-{start + 9998}" for start in range(0, 1500 * 20_000, 20_000))
    assert 14_000 < len(text) < 30_000
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="more than 10000 seeds"):
            parse_seeds(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"parsing a refused seeds text peaked at {peak / 1e6:.1f} MB"


@pytest.mark.parametrize("text,reason", [
    ("9223372036854775808", "too large"),
    ("0-99999999999999999999999", "too large"),
    ("-5", "not a seed"),
    ("٣", "not a seed"),  # an Arabic-Indic digit: int() reads it, a seed must be ASCII
    ("5-1", "backwards"),
])
def test_bad_seeds_say_what_is_wrong(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_seeds(text)


def test_api_refuses_too_many_seed_ranges_with_the_field(owner_api, version):
    text = ",".join(f"{start}-{start + 9998}" for start in range(0, 1500 * 20_000, 20_000))
    response = owner_api.post("/runs", run_body(seeds=text))
    assert response.status_code == 400
    assert response.json()["field"] == "seeds"
    assert not Run.objects.exists()


# -- offsets and integers --------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["offset=-1", "offset=9223372036854775808", "limit=99999999999999999999999"])
def test_list_offsets_out_of_range_are_4xx(owner_api, version, query):
    for path in ("/runs", "/review/queue", "/environments/inputs/versions/1/annotations"):
        response = owner_api.get(f"{path}?{query}")
        assert 400 <= response.status_code < 500, (path, query, response.status_code)
        assert response.json()["field"] in ("offset", "limit")


def test_steps_offsets_out_of_range_are_4xx(owner, owner_api, version):
    run = owner_api.post("/runs", run_body()).json()
    rollout_id = owner_api.get(f"/runs/{run['id']}/rollouts").json()[0]["id"]
    for query in ("offset=-3", "offset=9223372036854775807", "offset=9223372036854775808"):
        api = owner_api.get(f"/rollouts/{rollout_id}/steps?{query}")
        assert api.status_code in (200, 400, 422), (query, api.status_code)
        page = login(owner).get(f"/t/alpha/rollouts/{rollout_id}/steps.json?{query}")
        assert page.status_code in (200, 400), (query, page.status_code)


def test_ids_past_a_bigint_are_refused_not_500(owner, owner_api, version):
    assert owner_api.get("/runs/9223372036854775808").status_code == 400
    assert login(owner).get("/t/alpha/runs/99999999999999999999/").status_code == 400
    response = owner_api.post("/runs", run_body(agent=99999999999999999999))
    assert response.status_code == 400
    assert response.json()["field"] == "agent"


# -- run limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("limits,field", [
    ({"step_timeout_s": 1e6}, "limits.step_timeout_s"),
    ({"max_steps": 1e18}, "limits.max_steps"),
    ({"verify_timeout_s": 1e308}, "limits.verify_timeout_s"),
    ({"episode_timeout_s": 86_401}, "limits.episode_timeout_s"),
    ({"memory_mb": 10**6}, "limits.memory_mb"),
])
def test_run_limits_are_bounded(owner_api, version, limits, field):
    response = owner_api.post("/runs", run_body(limits=limits))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Run.objects.exists()


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_run_limits_are_refused(owner_api, version, raw):
    body = json.dumps(run_body(limits={"step_timeout_s": 1})).replace('"step_timeout_s": 1', f'"step_timeout_s": {raw}')
    response = owner_api.post("/runs", body)
    assert response.status_code == 400, response.content
    assert "finite" in response.json()["detail"] or "NaN" in response.json()["detail"]
    assert not Run.objects.exists()


def test_run_page_refuses_a_limit_past_the_maximum(owner, version):
    response = login(owner).post("/t/alpha/runs/new/", {
        "agent": "random", "tasks": "all", "seeds": "0", "repeats": 1, "max_steps": 10**9,
        "episode_timeout_s": "", "reviews_required": 1, "version": version.pk,
    })
    assert response.status_code in (200, 400)
    assert not Run.objects.exists()


def commit_files(owner_api, team, owner, files):
    from environments import services as env_services

    env_services.environment_create(team=team, actor=owner, name="x", slug="x", files=files)
    return owner_api.post("/environments/x/versions", {"message": "try"})


@pytest.mark.parametrize("line", ["max_steps = 1000000000000000000", "[limits]\nstep_timeout_s = 1e6", "[limits]\nverify_timeout_s = inf"])
def test_manifest_limits_are_bounded_at_commit(owner_api, team, owner, line):
    files = {
        "environment.toml": f'name = "x"\nkind = "python"\nentrypoint = "env:Env"\n{line}\n',
        "env.py": ENV_PY, "tasks.jsonl": '{"id": "t1"}\n',
    }
    response = commit_files(owner_api, team, owner, files)
    assert response.status_code == 400, response.content
    assert "environment.toml" in response.json()["detail"]


# -- NUL, surrogates, NaN, huge integers, nesting in request bodies --------------------------------


@pytest.mark.parametrize("name,field", [
    ("nul\x00name", "name"),
    ("\ud800lonely", "name"),
])
def test_text_fields_with_nul_or_surrogates_are_refused_by_name(owner_api, name, field):
    response = owner_api.post("/agents", json.dumps({"name": name, "kind": "random"}))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_deep_json_body_is_refused(owner_api):
    body = '{"name": "deep", "kind": "random", "config": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = owner_api.post("/agents", body)
    assert response.status_code == 400
    assert "nested" in response.json()["detail"]


def test_huge_integer_in_body_is_refused(owner_api, version):
    response = owner_api.post("/runs", json.dumps(run_body(seeds=[2**64])))
    assert response.status_code == 400
    assert response.json()["field"] == "seeds[0]"


def test_nul_in_query_string_and_page_forms_is_refused(owner, version):
    client = login(owner)
    assert client.get("/t/alpha/review/?environment=%00").status_code == 400
    response = client.post("/t/alpha/agents/new/", {"name": "a\x00b", "kind": "random"})
    assert response.status_code == 400
    assert b"name" in response.content


def test_nul_in_a_draft_file_is_refused(owner_api, environment):
    response = owner_api.post("/environments/counter/draft/files", {"path": "notes.txt", "content": "a\x00b", "revision": 1})
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]


# -- packages nested too deeply --------------------------------------------------------------------


@pytest.mark.parametrize("file,content,expected", [
    ("tasks.jsonl", '{"id": "t1", "x": ' + "[" * 50_000 + "]" * 50_000 + "}\n", "nested"),
    ("environment.toml", 'name = "x"\nkind = "python"\nentrypoint = "env:Env"\nx = ' + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ("env.py", ENV_PY + "x = " + "-" * 100_000 + "1\n", "nested"),
    ("tasks.jsonl", '{"id": "t1", "x": NaN}\n', "NaN"),
])
def test_deeply_nested_packages_are_refused_with_the_file(owner_api, team, owner, file, content, expected):
    files = {
        "environment.toml": 'name = "x"\nkind = "python"\nentrypoint = "env:Env"\n', "env.py": ENV_PY,
        "tasks.jsonl": '{"id": "t1"}\n', file: content,
    }
    response = commit_files(owner_api, team, owner, files)
    assert response.status_code in (400, 422), response.content
    assert expected in response.content.decode()
    assert file in response.content.decode()


def test_a_seed_past_int64_on_the_run_page_is_an_inline_error_that_keeps_what_was_typed(owner, version):
    huge = "99999999999999999999"
    response = login(owner).post("/t/alpha/runs/new/", {
        "agent": "random", "tasks": "all", "seeds": huge, "repeats": 1, "max_steps": "", "episode_timeout_s": "",
        "reviews_required": 1, "version": "inputs@1",
    })
    assert response.status_code == 200
    page = response.content.decode()
    assert "seeds are whole numbers from 0 to 2^63-1" in page
    assert f'value="{huge}"' in page  # the form is shown again with the text as typed
    assert "New run" in page or "Run" in page
    assert not Run.objects.exists()


def test_a_page_form_the_gate_refuses_gets_a_styled_page_with_the_field_and_a_way_back(owner, version):
    client = login(owner)
    response = client.post("/t/alpha/agents/new/", {"name": "a\x00b", "kind": "random"},
                           HTTP_REFERER="http://testserver/t/alpha/agents/new/")
    assert response.status_code == 400
    page = response.content.decode()
    assert "<strong>name</strong>: contains a NUL character" in page
    assert "studio.css" in page and 'href="http://testserver/t/alpha/agents/new/"' in page
    # A Referer from elsewhere is not offered as the way back.
    response = client.post("/t/alpha/agents/new/", {"name": "a\x00b"}, HTTP_REFERER="https://evil.example/")
    assert "evil.example" not in response.content.decode()


@pytest.mark.parametrize("fields, field, message", [
    ({"task_id": "t1", "seed": "99999999999999999999"}, "seed", "less than or equal to 9223372036854775807"),
    ({"task_id": "t1", "seed": "-3"}, "seed", "greater than or equal to 0"),
    ({"task_id": "nope", "seed": "7"}, "task_id", "Task &#x27;nope&#x27; is not in inputs@1."),
])
def test_bad_play_input_is_an_inline_error_that_keeps_what_was_typed(owner, version, fields, field, message):
    response = login(owner).post("/t/alpha/play/start/", {"version": "inputs@1", **fields})
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page
    assert "Start playing" in page  # the chooser again, not a bare error page
    if field == "seed":
        assert f'name="seed" value="{fields["seed"]}"' in page
        assert '<option value="t1" selected>' in page
    assert not Run.objects.exists()


@pytest.mark.parametrize("query", ["", "&purpose=all", "&disagreement=true&purpose=reverify&outcome=fail"])
def test_the_largest_review_queue_offset_is_an_empty_page_not_a_500(owner_api, query):
    response = owner_api.get(f"/review/queue?offset={2**63 - 1}{query}")
    assert response.status_code == 200, response.content
    assert response.json()["items"] == []
