"""State changes for environments: drafts, versions, package import."""
import difflib
import re

from django.db import IntegrityError, transaction
from django.db.models import F, Max

from studio.errors import Conflict, DomainError
from studio.slugs import slug_from
from studio.storage_quota import storage_quota_check

from . import package
from .dependencies import services as dependency_services
from .models import Draft, Environment, EnvironmentKind, EnvironmentVersion

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
PATH_RE = re.compile(r"^(?!/)(?!.*\.\.)(?!.*//)[A-Za-z0-9_.\-/]{1,200}$")
MAX_FILE_CHARS = 2 * 1024 * 1024


class InvalidInput(DomainError):
    pass


class NothingToCommit(InvalidInput):
    """The files are those of the latest version: a commit would be a copy with the same content hash."""


class StaleDraft(Conflict):
    """The draft changed since the editor loaded it; carries both versions of the file."""

    def __init__(self, *, draft: Draft, path: str | None, yours: str | None):
        who = draft.updated_by.username if draft.updated_by else "someone"
        super().__init__(
            f"The draft was changed by {who} (now revision {draft.revision}) after you opened it. "
            "Your text is kept below beside theirs; merge and save again.",
            field="revision",
        )
        self.draft = draft
        self.path = path
        self.yours = yours
        self.theirs = draft.files.get(path) if path else None

    def api_extra(self):
        return {"revision": self.draft.revision, "path": self.path, "theirs": self.theirs, "yours": self.yours}

    @property
    def diff_lines(self) -> list[str]:
        """Theirs against yours as unified-diff lines, what the conflict panel shows first."""
        if self.path is None or self.yours is None:
            return []
        theirs = {self.path: self.theirs} if self.theirs is not None else {}
        changes = diff_files(theirs, {self.path: self.yours}, old_label="theirs", new_label="yours")
        return changes[0]["lines"] if changes else []


class InvalidVersion(DomainError):
    """Commit refused: the files do not form a valid package."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems), field="files")


def _check_slug(slug: str) -> str:
    slug = (slug or "").strip().lower()
    if not SLUG_RE.match(slug):
        raise InvalidInput(
            "Slug must be 1-80 lowercase letters, digits or dashes, starting with a letter or digit.",
            field="slug",
        )
    return slug


def check_path(path: str) -> str:
    path = (path or "").strip()
    if not PATH_RE.match(path) or path.endswith("/"):
        raise InvalidInput(
            f"Bad file path {path!r}: use a relative path of letters, digits, '_', '-', '.', '/' (no '..').",
            field="path",
        )
    return path


def starter_files(*, name: str, kind: str) -> dict[str, str]:
    class_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name) if part) or "MyEnv"
    if not class_name[0].isalpha():
        class_name = "Env" + class_name
    files = {
        "environment.toml": (
            f'name = "{name}"\nkind = "{kind}"\nentrypoint = "env:{class_name}"\nmax_steps = 50\n\n'
            "[limits]\nstep_timeout_s = 5\nepisode_timeout_s = 60\nmemory_mb = 512\n"
        ),
        "env.py": (
            '"""A starter environment: reach the target number by adding 1 or 2."""\n'
            "from studio_sdk import Environment\n\n\n"
            f"class {class_name}(Environment):\n"
            '    action_space = {"type": "choice", "values": [1, 2]}\n\n'
            "    def reset(self, task, seed):\n"
            "        self.seed_rng(seed)\n"
            '        self.target = int(task.get("target", 5))\n'
            "        self.total = 0\n"
            '        return {"total": self.total, "target": self.target}\n\n'
            "    def step(self, action):\n"
            "        self.total += int(action)\n"
            "        done = self.total >= self.target\n"
            "        reward = 1.0 if self.total == self.target else 0.0\n"
            '        return {"total": self.total, "target": self.target}, reward, done, False, {}\n\n'
            "    def verify(self):\n"
            "        if self.total == self.target:\n"
            '            return 1.0, f"reached exactly {self.target}"\n'
            '        return 0.0, f"ended at {self.total}, target {self.target}"\n'
        ),
        "tasks.jsonl": '{"id": "t1", "difficulty": 1, "target": 3}\n{"id": "t2", "difficulty": 2, "target": 7}\n',
    }
    if kind == EnvironmentKind.BROWSER:
        files["site/index.html"] = "<!doctype html>\n<title>Start</title>\n<h1>Hello</h1>\n"
    return files


def environment_create(
    *, team, actor, name: str, slug: str = "", description: str = "", kind: str = "python", files=None
) -> Environment:
    name = (name or "").strip()
    if not name:
        raise InvalidInput("An environment needs a name.", field="name")
    if len(name) > 120:
        raise InvalidInput("Name is longer than 120 characters.", field="name")
    if kind not in EnvironmentKind.values:
        raise InvalidInput(f"Kind must be one of {', '.join(EnvironmentKind.values)}.", field="kind")
    slug = _check_slug(slug or slug_from(name, fallback="env"))
    try:
        with transaction.atomic():
            env = Environment.objects.create(
                team=team, slug=slug, name=name, description=description or "", kind=kind, created_by=actor
            )
            Draft.objects.create(
                environment=env, files=files if files is not None else starter_files(name=name, kind=kind),
                updated_by=actor,
            )
    except IntegrityError:
        raise InvalidInput(f"This team already has an environment with slug {slug!r}.", field="slug") from None
    return env


def environment_update(*, environment: Environment, actor, name=None, description=None) -> Environment:
    if name is not None:
        name = name.strip()
        if not name:
            raise InvalidInput("An environment needs a name.", field="name")
        environment.name = name[:120]
    if description is not None:
        environment.description = description
    environment.save()
    return environment


def _chars(files: dict) -> int:
    return sum(len(path) + len(content or "") for path, content in files.items())


def _draft_change(*, environment, actor, expected_revision: int, change, path=None, yours=None) -> Draft:
    """Apply `change(files) -> files` if the draft is still at `expected_revision`, else StaleDraft."""
    with transaction.atomic():
        draft = Draft.objects.select_for_update(of=("self",)).select_related("updated_by").get(environment=environment)
        if expected_revision is not None and draft.revision != int(expected_revision):
            raise StaleDraft(draft=draft, path=path, yours=yours)
        files = change(dict(draft.files))
        if _chars(files) > _chars(draft.files):  # a team over its quota may still shrink its draft
            storage_quota_check(team_id=environment.team_id, what="Saving the draft")
        for file, inner in package.file_and_folder_clashes(files):
            raise InvalidInput(package.file_and_folder_reason(file, inner) + ".", field="path")
        Draft.objects.filter(pk=draft.pk).update(files=files, revision=F("revision") + 1, updated_by=actor)
    draft.refresh_from_db()
    return draft


def draft_save_file(*, environment, actor, path: str, content: str, expected_revision: int) -> Draft:
    path = check_path(path)
    if len(content) > MAX_FILE_CHARS:
        raise InvalidInput(f"{path} is over {MAX_FILE_CHARS // 1024 // 1024} MB.", field="content")
    content = content.replace("\r\n", "\n")

    def change(files):
        files[path] = content
        return files

    return _draft_change(
        environment=environment, actor=actor, expected_revision=expected_revision, change=change,
        path=path, yours=content,
    )


def draft_add_file(*, environment, actor, path: str, expected_revision: int, content: str = "") -> Draft:
    path = check_path(path)

    def change(files):
        if path in files:
            raise InvalidInput(f"{path} already exists.", field="path")
        files[path] = content
        return files

    return _draft_change(environment=environment, actor=actor, expected_revision=expected_revision, change=change)


def draft_rename_file(*, environment, actor, path: str, new_path: str, expected_revision: int) -> Draft:
    new_path = check_path(new_path)

    def change(files):
        if path not in files:
            raise InvalidInput(f"{path} is not in the draft.", field="path")
        if new_path in files:
            raise InvalidInput(f"{new_path} already exists.", field="new_path")
        files[new_path] = files.pop(path)
        return files

    return _draft_change(environment=environment, actor=actor, expected_revision=expected_revision, change=change)


def draft_delete_file(*, environment, actor, path: str, expected_revision: int) -> Draft:
    def change(files):
        if path not in files:
            raise InvalidInput(f"{path} is not in the draft.", field="path")
        del files[path]
        return files

    return _draft_change(environment=environment, actor=actor, expected_revision=expected_revision, change=change)


def draft_reset_from_version(*, version: EnvironmentVersion, actor, expected_revision=None) -> Draft:
    def change(_files):
        return dict(version.files)

    draft = _draft_change(
        environment=version.environment, actor=actor, expected_revision=expected_revision, change=change
    )
    Draft.objects.filter(pk=draft.pk).update(based_on=version)
    draft.based_on = version
    return draft


def version_commit(*, environment, actor, message: str, files=None, expected_revision=None) -> EnvironmentVersion:
    """Validate the draft's files (or `files`) and store them as the next immutable version."""
    message = (message or "").strip()
    if not message:
        raise InvalidInput("A version needs a message saying what changed.", field="message")
    if len(message) > 500:
        raise InvalidInput("Message is longer than 500 characters.", field="message")
    storage_quota_check(team_id=environment.team_id, what="New version")
    checked = _entrypoint_checked_before_commit(environment=environment, files=files)
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        draft = Draft.objects.select_for_update().get(environment=env)
        from_draft = files is None
        if from_draft:
            if expected_revision is not None and draft.revision != int(expected_revision):
                raise StaleDraft(draft=draft, path=None, yours=None)
            files = dict(draft.files)
        problems = package.validate_package(files)
        if problems:
            raise InvalidVersion(problems)
        manifest = package.parse_manifest(files)
        if manifest.get("kind") != env.kind:
            raise InvalidVersion(
                [package.PackageProblem("environment.toml", None, f"kind is {manifest.get('kind')!r} but this environment is {env.kind!r}")]
            )
        parent = env.versions.order_by("-number").first()
        digest = package.content_hash(files)
        # An unchanged draft is refused; an explicit package (push, upload) may re-import the same files.
        if from_draft and parent is not None and parent.content_hash == digest:
            raise NothingToCommit(f"Nothing to commit: the files are the same as {parent.label}.", field="files")
        number = (env.versions.aggregate(m=Max("number"))["m"] or 0) + 1
        depenv = dependency_services.dependency_environment_attach(
            files=files, content_hash=digest, checked=checked == digest
        )
        version = EnvironmentVersion.objects.create(
            dependency_environment=depenv,
            environment=env,
            number=number,
            parent=parent,
            files=files,
            manifest=manifest,
            tasks=package.parse_tasks(files),
            content_hash=digest,
            author=actor,
            message=message,
        )
        draft.files = files
        draft.based_on = version
        draft.revision += 1
        draft.updated_by = actor
        draft.save()
    return version


def _entrypoint_checked_before_commit(*, environment, files) -> str | None:
    """Run the entrypoint check that needs a sandbox (plugin ids, packages with dependencies) before
    the commit's transaction, when it can run now; raise InvalidVersion on failure. Returns the content
    hash of the files that passed (the draft's when `files` is None), None when nothing was checked."""
    files = dict(files if files is not None else Draft.objects.get(environment=environment).files)
    if package.validate_package(files):
        return None  # the commit refuses it with every problem, in the transaction
    check = dependency_services.entrypoint_check_before_commit(
        team_id=environment.team_id, files=files, manifest=package.parse_manifest(files), tasks=package.parse_tasks(files)
    )
    if check is None:
        return None
    if not check.ok:
        line = package.manifest_key_line(files, "entrypoint")
        raise InvalidVersion([package.PackageProblem(package.MANIFEST_FILE, line, check.message)])
    return package.content_hash(files)


def package_import(*, team, actor, data: bytes, filename: str, message: str = "", environment=None) -> EnvironmentVersion:
    """Read an uploaded archive and commit it as a new version (creating the environment if needed)."""
    try:
        files = package.read_archive(data, filename)
    except package.InvalidPackage as exc:
        raise InvalidVersion([package.PackageProblem(exc.file or filename, exc.line, exc.reason)]) from None
    return package_files_import(team=team, actor=actor, files=files, message=message or f"Imported {filename}",
                                environment=environment)


def package_files_import(*, team, actor, files: dict[str, str], message: str, environment=None) -> EnvironmentVersion:
    """Commit a package's files as a new version, in one transaction: of `environment`, else of the
    team's environment named in environment.toml (created if new). Nothing is written when refused."""
    problems = package.validate_package(files)
    if problems:
        raise InvalidVersion(problems)
    manifest = package.parse_manifest(files)
    with transaction.atomic():
        if environment is None:
            slug = slug_from(str(manifest["name"]), fallback="env")
            environment = Environment.objects.filter(team=team, slug=slug).first()
            if environment is None:
                environment = environment_create(
                    team=team, actor=actor, name=str(manifest["name"]), slug=slug,
                    kind=manifest["kind"], files=files,
                )
        return version_commit(environment=environment, actor=actor, message=message, files=files)


def diff_files(old: dict[str, str], new: dict[str, str], *, old_label: str, new_label: str) -> list[dict]:
    """Per-file unified diffs between two file sets: [{path, status, diff, added, removed}]."""
    result = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        status = "added" if a is None else "deleted" if b is None else "modified"
        lines = list(
            difflib.unified_diff(
                (a or "").splitlines(keepends=True),
                (b or "").splitlines(keepends=True),
                fromfile=f"{old_label}/{path}",
                tofile=f"{new_label}/{path}",
            )
        )
        added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
        result.append(
            {"path": path, "status": status, "diff": "".join(lines), "lines": [line.rstrip("\n") for line in lines],
             "added": added, "removed": removed}
        )
    return result
