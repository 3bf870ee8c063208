"""Drafts, commits, immutable versions, diffs and restore, through the services."""
import pytest
from django.db import IntegrityError, transaction

from environments import package, services
from environments.models import EnvironmentVersion


def test_new_environment_starts_with_a_valid_draft(environment):
    assert package.validate_package(environment.draft.files) == []


def test_commit_numbers_versions_and_links_parents(environment, owner):
    v1 = services.version_commit(environment=environment, actor=owner, message="first")
    services.draft_save_file(environment=environment, actor=owner, path="notes.md", content="hi", expected_revision=environment.draft.revision + 1)
    v2 = services.version_commit(environment=environment, actor=owner, message="second")
    assert (v1.number, v2.number) == (1, 2)
    assert v2.parent == v1 and v1.parent is None
    assert v1.content_hash == package.content_hash(v1.files)
    assert v1.content_hash != v2.content_hash
    assert v2.files["notes.md"] == "hi" and "notes.md" not in v1.files
    assert v2.author == owner and v2.message == "second"


def test_committing_an_unchanged_draft_is_refused_as_nothing_to_commit(environment, owner):
    v1 = services.version_commit(environment=environment, actor=owner, message="first")
    with pytest.raises(services.NothingToCommit, match="Nothing to commit: the files are the same as"):
        services.version_commit(environment=environment, actor=owner, message="again")
    assert list(environment.versions.values_list("number", flat=True)) == [v1.number]


def test_the_commit_page_says_nothing_to_commit(environment, owner, team):
    from tests.conftest import login

    services.version_commit(environment=environment, actor=owner, message="first")
    environment.draft.refresh_from_db()
    response = login(owner).post(
        f"/t/{team.slug}/environments/{environment.slug}/commit/",
        {"message": "again", "revision": environment.draft.revision}, headers={"HX-Request": "true"},
    )
    assert response.status_code == 400 and "Nothing to commit" in response.content.decode()


def test_version_rows_cannot_be_changed(environment, owner):
    v1 = services.version_commit(environment=environment, actor=owner, message="first")
    v1.message = "rewritten"
    with pytest.raises(ValueError, match="immutable"):
        v1.save()
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        EnvironmentVersion.objects.filter(pk=v1.pk).update(message="rewritten")
    assert EnvironmentVersion.objects.get(pk=v1.pk).message == "first"


def test_stale_save_is_refused_and_keeps_both_texts(environment, owner, author):
    rev = environment.draft.revision
    services.draft_save_file(environment=environment, actor=author, path="env.py", content="# theirs\n", expected_revision=rev)
    with pytest.raises(services.StaleDraft) as caught:
        services.draft_save_file(environment=environment, actor=owner, path="env.py", content="# mine\n", expected_revision=rev)
    assert caught.value.theirs == "# theirs\n" and caught.value.yours == "# mine\n"
    assert "arthur" in caught.value.message
    environment.draft.refresh_from_db()
    assert environment.draft.files["env.py"] == "# theirs\n"


def test_commit_refuses_invalid_files_naming_file_and_line(environment, owner):
    rev = environment.draft.revision
    draft = services.draft_save_file(environment=environment, actor=owner, path="env.py", content="def broken(:\n", expected_revision=rev)
    draft = services.draft_save_file(environment=environment, actor=owner, path="tasks.jsonl", content='{"id": "a"}\n{"id": "a"}\n', expected_revision=draft.revision)
    with pytest.raises(services.InvalidVersion) as caught:
        services.version_commit(environment=environment, actor=owner, message="bad")
    text = [str(p) for p in caught.value.problems]
    assert any(p.file == "env.py" and p.line == 1 for p in caught.value.problems), text
    assert any(p.file == "tasks.jsonl" and p.line == 2 for p in caught.value.problems), text
    assert not environment.versions.exists()


def test_commit_refuses_a_bad_concurrent_sessions_naming_its_line(environment, owner):
    manifest = environment.draft.files["environment.toml"]
    lines = manifest.splitlines()
    # Top level: before the first [table].
    first_table = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    lines.insert(first_table, "concurrent_sessions = 0")
    services.draft_save_file(
        environment=environment, actor=owner, path="environment.toml", content="\n".join(lines) + "\n",
        expected_revision=environment.draft.revision,
    )
    with pytest.raises(services.InvalidVersion) as caught:
        services.version_commit(environment=environment, actor=owner, message="shared")
    assert [str(p) for p in caught.value.problems] == [
        f"environment.toml line {first_table + 1}: 'concurrent_sessions' must be an integer from 1 to 4096, not 0"
    ]
    assert not environment.versions.exists()


def test_commit_needs_a_message(environment, owner):
    with pytest.raises(services.InvalidInput, match="message"):
        services.version_commit(environment=environment, actor=owner, message="  ")


def test_file_add_rename_delete(environment, owner):
    d = services.draft_add_file(environment=environment, actor=owner, path="lib/helpers.py", expected_revision=environment.draft.revision)
    d = services.draft_rename_file(environment=environment, actor=owner, path="lib/helpers.py", new_path="lib/util2.py", expected_revision=d.revision)
    assert "lib/util2.py" in d.files and "lib/helpers.py" not in d.files
    d = services.draft_delete_file(environment=environment, actor=owner, path="lib/util2.py", expected_revision=d.revision)
    assert "lib/util2.py" not in d.files
    with pytest.raises(services.InvalidInput, match="path"):
        services.draft_add_file(environment=environment, actor=owner, path="../escape.py", expected_revision=d.revision)
    with pytest.raises(services.InvalidInput, match="already exists"):
        services.draft_add_file(environment=environment, actor=owner, path="env.py", expected_revision=d.revision)


def test_restore_draft_from_version_and_diff(environment, owner):
    v1 = services.version_commit(environment=environment, actor=owner, message="first")
    services.draft_save_file(environment=environment, actor=owner, path="env.py", content=v1.files["env.py"] + "# more\n", expected_revision=environment.draft.revision + 1)
    v2 = services.version_commit(environment=environment, actor=owner, message="second")
    diff = services.diff_files(v1.files, v2.files, old_label="v1", new_label="v2")
    assert [(f["path"], f["status"], f["added"], f["removed"]) for f in diff] == [("env.py", "modified", 1, 0)]
    draft = services.draft_reset_from_version(version=v1, actor=owner)
    assert draft.files == v1.files and draft.based_on == v1
