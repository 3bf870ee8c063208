"""Environment pages: team scoping, the editor's htmx save and commit, uploads and downloads."""
import io
import tarfile

import pytest

from environments import package, services
from tests.conftest import login


@pytest.fixture
def v1(environment, owner):
    return services.version_commit(environment=environment, actor=owner, message="first")


PAGES = [
    "/t/alpha/environments/counter/",
    "/t/alpha/environments/counter/versions/",
    "/t/alpha/environments/counter/versions/1/",
    "/t/alpha/environments/counter/versions/1/download/",
    "/t/alpha/environments/counter/diff/",
]
POSTS = [
    ("/t/alpha/environments/counter/files/save/", {"path": "env.py", "content": "x", "revision": 1}),
    ("/t/alpha/environments/counter/files/add/", {"new_path": "a.py", "revision": 1}),
    ("/t/alpha/environments/counter/files/rename/", {"path": "env.py", "new_path": "b.py", "revision": 1}),
    ("/t/alpha/environments/counter/files/delete/", {"path": "env.py", "revision": 1}),
    ("/t/alpha/environments/counter/commit/", {"message": "x", "revision": 1}),
    ("/t/alpha/environments/counter/versions/1/restore/", {}),
    ("/t/alpha/environments/counter/settings/", {"name": "hacked"}),
]


@pytest.mark.parametrize("url", PAGES)
def test_members_see_pages_outsiders_get_404(owner, outsider, v1, url):
    assert login(owner).get(url).status_code == 200
    assert login(outsider).get(url).status_code == 404


@pytest.mark.parametrize("url,data", POSTS)
def test_outsiders_cannot_change_anything(outsider, v1, url, data):
    before = dict(v1.environment.draft.files)
    assert login(outsider).post(url, data).status_code == 404
    v1.environment.refresh_from_db()
    v1.environment.draft.refresh_from_db()
    assert v1.environment.draft.files == before and v1.environment.name == "Counter"


def test_outsider_of_same_slug_sees_only_own_team(owner, outsider, other_team, v1):
    services.environment_create(team=other_team, actor=outsider, name="Counter", slug="counter")
    page = login(outsider).get("/t/bravo/environments/counter/versions/").content.decode()
    assert "No versions yet" in page


def test_viewer_cannot_save(viewer, environment):
    r = login(viewer).post("/t/alpha/environments/counter/files/save/", {"path": "env.py", "content": "x", "revision": 1})
    assert r.status_code == 403


def test_htmx_save_returns_the_status_partial(owner, environment):
    c = login(owner)
    rev = environment.draft.revision
    r = c.post("/t/alpha/environments/counter/files/save/", {"path": "env.py", "content": "# new", "revision": rev}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and f'data-saved-revision="{rev + 1}"' in r.content.decode()
    r = c.post("/t/alpha/environments/counter/files/save/", {"path": "env.py", "content": "# stale", "revision": rev}, headers={"HX-Request": "true"})
    assert r.status_code == 409 and "# new" in r.content.decode() and "# stale" in r.content.decode()


def test_commit_through_the_page_redirects_to_the_version(owner, environment):
    r = login(owner).post("/t/alpha/environments/counter/commit/", {"message": "v1", "revision": environment.draft.revision}, headers={"HX-Request": "true"})
    assert r["HX-Redirect"] == "/t/alpha/environments/counter/versions/1/"


def test_download_then_reupload_creates_the_next_version(owner, v1):
    c = login(owner)
    z = c.get("/t/alpha/environments/counter/versions/1/download/")
    assert z["Content-Disposition"] == 'attachment; filename="counter-v1.zip"'
    data = io.BytesIO(z.content)
    data.name = "counter-v1.zip"
    r = c.post("/t/alpha/environments/upload/", {"file": data, "message": "round trip"})
    assert r.status_code == 302 and r["Location"] == "/t/alpha/environments/counter/versions/2/"
    assert v1.environment.versions.get(number=2).content_hash == v1.content_hash


def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(kind)
                tar.addfile(info, io.BytesIO(kind))
    return buf.getvalue()


@pytest.mark.parametrize(
    "members,reason",
    [
        ([("pkg/environment.toml", b"x"), ("pkg/link", "symlink")], "link"),
        ([("/etc/cron.d/evil", b"x")], "absolute"),
        ([("../../evil.py", b"x")], ".."),
        ([("env.py", "é".encode("latin-1"))], "UTF-8"),
    ],
)
def test_bad_archives_are_refused_on_the_page_with_a_reason(owner, members, reason):
    data = io.BytesIO(_tar(members))
    data.name = "bad.tar.gz"
    r = login(owner).post("/t/alpha/environments/upload/", {"file": data})
    assert r.status_code == 400
    assert reason in r.content.decode()


def test_oversized_archive_is_refused(owner):
    data = io.BytesIO(b"\0" * (package.MAX_ARCHIVE_BYTES + 1))
    data.name = "big.zip"
    r = login(owner).post("/t/alpha/environments/upload/", {"file": data})
    assert r.status_code == 400 and "20 MB" in r.content.decode()
