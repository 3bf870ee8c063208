"""A package holding a file `data` and a file `data/inner.txt` cannot be written into any sandbox (every
rollout would end in NotADirectoryError): it is refused wherever files come in, naming both."""
import importlib
import io
import tarfile

import pytest
from django.core.management import CommandError, call_command
from django.urls import clear_url_caches

from environments import package
from environments.models import Draft
from tests.conftest import login


def clash_files(environment) -> dict:
    return dict(environment.draft.files) | {"data": "a file\n", "data/inner.txt": "and a folder\n"}


def tar_gz(files: dict) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo("pkg/" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def upload(data: bytes, name: str):
    f = io.BytesIO(data)
    f.name = name
    return f


def names_both(text: str) -> bool:
    return "'data'" in text and "'data/inner.txt'" in text


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_with_a_file_that_is_also_a_folder_is_refused_at_upload(owner_api, environment, kind):
    files = clash_files(environment)
    data = package.build_zip(files, "pkg") if kind == "zip" else tar_gz(files)
    response = owner_api.post("/packages", {"file": upload(data, f"pkg.{kind}")}, content_type=None)
    assert response.status_code == 400, response.content
    assert names_both(response.json()["detail"])
    assert environment.versions.count() == 0


def test_env_push_refuses_it_naming_both(environment, tmp_path):
    archive = tmp_path / "pkg.tar.gz"
    archive.write_bytes(tar_gz(clash_files(environment)))
    with pytest.raises(CommandError) as refused:
        call_command("env_push", str(archive), "--team", environment.team.slug)
    assert names_both(str(refused.value))


def test_a_draft_holding_both_is_refused_at_commit(owner_api, environment):
    Draft.objects.filter(environment=environment).update(files=clash_files(environment))
    response = owner_api.post("/environments/counter/versions", {"message": "clash"})
    assert response.status_code == 400
    assert names_both(response.json()["detail"])
    assert environment.versions.count() == 0


def test_the_editor_refuses_a_file_inside_a_file(owner_api, environment):
    rev = environment.draft.revision
    assert owner_api.post("/environments/counter/draft/files", {"path": "data", "revision": rev}).status_code in (200, 201)
    rev += 1
    response = owner_api.post("/environments/counter/draft/files", {"path": "data/inner.txt", "revision": rev})
    assert response.status_code == 400 and names_both(response.json()["detail"])
    response = owner_api.put("/environments/counter/draft/files/data/inner.txt", {"content": "x", "revision": rev})
    assert response.status_code == 400 and names_both(response.json()["detail"])
    environment.draft.refresh_from_db()
    assert "data/inner.txt" not in environment.draft.files and environment.draft.revision == rev


def test_the_editor_page_says_why(owner, environment):
    client = login(owner)
    rev = environment.draft.revision
    client.post("/t/alpha/environments/counter/files/add/", {"new_path": "data/inner.txt", "revision": rev})
    environment.draft.refresh_from_db()
    assert "data/inner.txt" in environment.draft.files
    response = client.post("/t/alpha/environments/counter/files/save/",
                           {"path": "data", "content": "x", "revision": environment.draft.revision})
    assert response.status_code == 400 and names_both(response.content.decode().replace("&#x27;", "'"))


@pytest.fixture
def reload_urls():
    yield
    import studio.urls

    importlib.reload(studio.urls)
    clear_url_caches()


def test_admin_is_off_by_default(client, db):
    assert client.get("/admin/").status_code == 404
    assert client.get("/admin/login/").status_code == 404


def test_admin_answers_when_enabled_and_only_to_staff(settings, owner, reload_urls):
    import studio.urls

    settings.ADMIN_ENABLED = True
    importlib.reload(studio.urls)
    clear_url_caches()
    response = login(owner).get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
