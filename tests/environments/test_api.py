"""The environments API: the same operations as the pages, token auth, 4xx JSON for bad input."""
import io
import zipfile

import pytest

from environments import package, services
from tests.conftest import api_for


@pytest.fixture
def committed(environment, owner):
    v1 = services.version_commit(environment=environment, actor=owner, message="first")
    return v1


def test_create_edit_commit_diff_download_reimport(owner_api):
    r = owner_api.post("/environments", {"name": "Maze Runner"})
    assert r.status_code == 201, r.content
    env = r.json()
    assert env["slug"] == "maze-runner" and env["latest_version"] is None
    draft = owner_api.get("/environments/maze-runner/draft").json()
    r = owner_api.post("/environments/maze-runner/versions", {"message": "v1"})
    assert r.status_code == 201 and r.json()["label"] == "maze-runner@1"
    rev = owner_api.get("/environments/maze-runner/draft").json()["revision"]
    new_env = draft["files"]["env.py"] + "\n# tuned\n"
    r = owner_api.put("/environments/maze-runner/draft/files/env.py", {"content": new_env, "revision": rev})
    assert r.status_code == 200, r.content
    r = owner_api.post("/environments/maze-runner/versions", {"message": "tune"})
    v2 = r.json()
    assert v2["number"] == 2 and v2["parent"] == 1
    diff = owner_api.get("/environments/maze-runner/diff", {"old": "1", "new": "2"}).json()
    assert [f["path"] for f in diff["files"]] == ["env.py"] and "+# tuned" in diff["files"][0]["diff"]
    z = owner_api.get("/environments/maze-runner/versions/2/package")
    assert z["Content-Type"] == "application/zip"
    assert package.read_archive(z.content, "x.zip") == owner_api.get("/environments/maze-runner/versions/2").json()["files"]
    r = owner_api.post("/packages", {"file": _upload(z.content, "maze.zip"), "message": "reimport"}, content_type=None)
    assert r.status_code == 201, r.content
    assert r.json()["label"] == "maze-runner@3"
    assert r.json()["content_hash"] == v2["content_hash"]


def _upload(data, name):
    f = io.BytesIO(data)
    f.name = name
    return f


def test_stale_save_gets_409_with_both_texts(owner_api, environment):
    rev = environment.draft.revision
    assert owner_api.put("/environments/counter/draft/files/env.py", {"content": "# a\n", "revision": rev}).status_code == 200
    r = owner_api.put("/environments/counter/draft/files/env.py", {"content": "# b\n", "revision": rev})
    assert r.status_code == 409
    body = r.json()
    assert body["field"] == "revision" and body["theirs"] == "# a\n" and body["yours"] == "# b\n"


@pytest.mark.parametrize(
    "method,path,payload,field",
    [
        ("post", "/environments", {}, "name"),
        ("post", "/environments", {"name": ""}, "name"),
        ("post", "/environments", {"name": "x", "kind": "quantum"}, "kind"),
        ("post", "/environments", {"name": "x", "slug": "Bad Slug!"}, "slug"),
        ("put", "/environments/counter/draft/files/env.py", {"content": "x"}, "revision"),
        ("put", "/environments/counter/draft/files/env.py", {"content": "x", "revision": "abc"}, "revision"),
        ("post", "/environments/counter/draft/files", {"path": "../../etc/passwd", "revision": 1}, "path"),
        ("post", "/environments/counter/versions", {}, "message"),
        ("post", "/environments/counter/draft/reset", {"version": 0}, "version"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(owner_api, environment, method, path, payload, field):
    r = getattr(owner_api, method)(path, payload)
    assert 400 <= r.status_code < 500, r.content
    assert r.json()["field"] == field, r.json()


def test_malformed_json_is_a_4xx(owner_api, environment):
    r = owner_api.client.post("/api/v1/environments", "{not json", content_type="application/json", headers=owner_api.headers)
    assert 400 <= r.status_code < 500


def test_invalid_commit_names_file_and_line(owner_api, environment):
    rev = environment.draft.revision
    owner_api.put("/environments/counter/draft/files/tasks.jsonl", {"content": '{"id": 1}\n', "revision": rev})
    r = owner_api.post("/environments/counter/versions", {"message": "bad"})
    assert r.status_code == 400
    assert r.json()["field"] == "files" and "tasks.jsonl line 1" in r.json()["detail"]


def test_bad_archive_upload_is_refused_with_reason(owner_api):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("../evil.py", "x")
    r = owner_api.post("/packages", {"file": _upload(buf.getvalue(), "evil.zip")}, content_type=None)
    assert r.status_code == 400 and ".." in r.json()["detail"]
    r = owner_api.post("/packages", {"file": _upload(b"not an archive", "x.zip")}, content_type=None)
    assert r.status_code == 400


def test_missing_token_is_401(db):
    from tests.conftest import ApiClient

    assert ApiClient(None).get("/environments").status_code == 401
    assert ApiClient("es_wrong").get("/environments").status_code == 401


def test_viewer_can_read_but_not_write(viewer, team, environment):
    api = api_for(viewer, team)
    assert api.get("/environments/counter").status_code == 200
    assert api.post("/environments", {"name": "Nope"}).status_code == 403
    assert api.post("/environments/counter/versions", {"message": "x"}).status_code == 403


CROSS_TEAM = [
    ("get", "/environments/counter", None),
    ("patch", "/environments/counter", {"name": "mine"}),
    ("get", "/environments/counter/draft", None),
    ("put", "/environments/counter/draft/files/env.py", {"content": "x", "revision": 1}),
    ("post", "/environments/counter/draft/files", {"path": "a.py", "revision": 1}),
    ("post", "/environments/counter/draft/rename", {"path": "env.py", "new_path": "b.py", "revision": 1}),
    ("delete", "/environments/counter/draft/files/env.py?revision=1", None),
    ("post", "/environments/counter/draft/reset", {"version": 1}),
    ("get", "/environments/counter/versions", None),
    ("post", "/environments/counter/versions", {"message": "x"}),
    ("get", "/environments/counter/versions/1", None),
    ("get", "/environments/counter/versions/1/files/env.py", None),
    ("get", "/environments/counter/versions/1/package", None),
    ("get", "/environments/counter/diff?old=1&new=draft", None),
]


@pytest.mark.parametrize("method,path,payload", CROSS_TEAM)
def test_other_teams_environment_is_404_on_every_endpoint(outsider_api, committed, method, path, payload):
    r = getattr(outsider_api, method)(path, payload)
    assert r.status_code == 404, (path, r.status_code, r.content)
    committed.environment.draft.refresh_from_db()
    assert committed.environment.name == "Counter"


def test_upload_into_other_teams_environment_is_404(outsider_api, committed):
    data = package.build_zip(committed.files, "counter")
    r = outsider_api.post("/packages", {"file": _upload(data, "c.zip"), "environment": "counter"}, content_type=None)
    assert r.status_code == 404
    assert committed.environment.versions.count() == 1


def test_openapi_and_docs_are_served(db):
    from django.test import Client

    spec = Client().get("/api/v1/openapi.json")
    assert spec.status_code == 200 and "/api/v1/environments" in spec.json()["paths"]
    assert Client().get("/api/v1/docs").status_code == 200
