"""REST endpoints for environments, drafts, versions, diffs and packages."""
from django.http import HttpResponse
from ninja import File, Form, Router, Status
from ninja.errors import HttpError
from ninja.files import UploadedFile

from studio.auth import require

from . import package, selectors, services
from .dependencies import services as dependency_services
from .harbor import services as harbor_services
from .schemas import (
    DiffOut,
    DraftMetaOut,
    DraftOut,
    DraftReset,
    EnvironmentIn,
    EnvironmentOut,
    EnvironmentPatch,
    FileAdd,
    FileRename,
    FileSave,
    VersionDetailOut,
    VersionIn,
    VersionOut,
)

router = Router(tags=["environments"])


def _env_out(env) -> dict:
    latest = env.versions.order_by("-number").values_list("number", flat=True).first()
    return {
        "slug": env.slug, "name": env.name, "description": env.description, "kind": env.kind,
        "latest_version": latest, "draft_revision": env.draft.revision,
        "created_at": env.created_at, "updated_at": env.updated_at,
    }


def _version_out(v, *, detail=False) -> dict:
    out = {
        "environment": v.environment.slug, "number": v.number, "label": v.label,
        "parent": v.parent.number if v.parent_id else None, "content_hash": v.content_hash,
        "author": v.author.username if v.author_id else None, "message": v.message,
        "created_at": v.created_at, "paths": sorted(v.paths) if hasattr(v, "paths") else selectors.version_paths(v),
    }
    if detail:
        out["manifest"] = v.manifest
        out["files"] = v.files
        out["dependencies"] = dependency_services.version_dependencies(v)
    return out


def _draft_meta(draft) -> dict:
    return {"revision": draft.revision, "paths": sorted(draft.files)}


def _versions_with_paths(versions):
    """Versions without their content, each annotated with `paths` (sorted), read inside the database."""
    from django.db.models.expressions import RawSQL

    paths = RawSQL("ARRAY(SELECT jsonb_object_keys(environments_environmentversion.files))", [])
    return selectors.without_version_content(versions).annotate(paths=paths)


@router.get("/environments", response=list[EnvironmentOut])
def list_environments(request):
    return [_env_out(e) for e in selectors.environments_for_team(team=request.team).select_related("draft").defer("draft__files")]


@router.post("/environments", response={201: EnvironmentOut})
def create_environment(request, payload: EnvironmentIn):
    require(request, "author")
    env = services.environment_create(team=request.team, actor=request.user, **payload.dict())
    return Status(201, _env_out(env))


@router.get("/environments/{slug}", response=EnvironmentOut)
def get_environment(request, slug: str):
    return _env_out(selectors.environment_get(team=request.team, slug=slug))


@router.patch("/environments/{slug}", response=EnvironmentOut)
def update_environment(request, slug: str, payload: EnvironmentPatch):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    services.environment_update(environment=env, actor=request.user, **payload.dict(exclude_unset=True))
    return _env_out(env)


@router.get("/environments/{slug}/draft", response=DraftOut)
def get_draft(request, slug: str):
    env = selectors.environment_get(team=request.team, slug=slug)
    d = env.draft
    return {"revision": d.revision, "based_on": d.based_on.number if d.based_on_id else None, "files": d.files}


@router.put("/environments/{slug}/draft/files/{path:path}", response=DraftMetaOut)
def save_file(request, slug: str, path: str, payload: FileSave):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    draft = services.draft_save_file(
        environment=env, actor=request.user, path=path, content=payload.content, expected_revision=payload.revision
    )
    return _draft_meta(draft)


@router.post("/environments/{slug}/draft/files", response={201: DraftMetaOut})
def add_file(request, slug: str, payload: FileAdd):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    draft = services.draft_add_file(
        environment=env, actor=request.user, path=payload.path, content=payload.content,
        expected_revision=payload.revision,
    )
    return Status(201, _draft_meta(draft))


@router.post("/environments/{slug}/draft/rename", response=DraftMetaOut)
def rename_file(request, slug: str, payload: FileRename):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    return _draft_meta(
        services.draft_rename_file(
            environment=env, actor=request.user, path=payload.path, new_path=payload.new_path,
            expected_revision=payload.revision,
        )
    )


@router.delete("/environments/{slug}/draft/files/{path:path}", response=DraftMetaOut)
def delete_file(request, slug: str, path: str, revision: int):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    return _draft_meta(
        services.draft_delete_file(environment=env, actor=request.user, path=path, expected_revision=revision)
    )


@router.post("/environments/{slug}/draft/reset", response=DraftMetaOut)
def reset_draft(request, slug: str, payload: DraftReset):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    version = selectors.version_get(environment=env, number=payload.version)
    return _draft_meta(
        services.draft_reset_from_version(version=version, actor=request.user, expected_revision=payload.revision)
    )


@router.get("/environments/{slug}/versions", response=list[VersionOut])
def list_versions(request, slug: str):
    env = selectors.environment_get(team=request.team, slug=slug)
    versions = _versions_with_paths(env.versions.select_related("author", "parent", "environment"))
    return [_version_out(v) for v in selectors.without_version_content(versions, "parent")]


@router.post("/environments/{slug}/versions", response={201: VersionOut})
def commit_version(request, slug: str, payload: VersionIn):
    require(request, "author")
    env = selectors.environment_get(team=request.team, slug=slug)
    v = services.version_commit(
        environment=env, actor=request.user, message=payload.message, expected_revision=payload.revision
    )
    return Status(201, _version_out(v))


@router.get("/environments/{slug}/versions/{number}", response=VersionDetailOut)
def get_version(request, slug: str, number: int):
    env = selectors.environment_get(team=request.team, slug=slug)
    return _version_out(selectors.version_get(environment=env, number=number), detail=True)


@router.get("/environments/{slug}/versions/{number}/files/{path:path}")
def get_version_file(request, slug: str, number: int, path: str):
    env = selectors.environment_get(team=request.team, slug=slug)
    v = selectors.version_get(environment=env, number=number)
    text, _ = selectors.version_file(v, path)
    if text is None:
        raise HttpError(404, f"{path} is not in {v.label}")
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@router.get("/environments/{slug}/diff", response=DiffOut)
def diff(request, slug: str, old: str, new: str = "draft"):
    """Compare two versions (`old=1&new=2`) or a version and the draft (`new=draft`)."""
    env = selectors.environment_get(team=request.team, slug=slug)
    old_label, old_files = _side(env, old, "old")
    new_label, new_files = _side(env, new, "new")
    return {
        "old": old_label, "new": new_label,
        "files": services.diff_files(old_files, new_files, old_label=old_label, new_label=new_label),
    }


def _side(env, ref: str, field: str):
    if ref == "draft":
        return "draft", env.draft.files
    if not ref.isdigit():
        raise services.InvalidInput(f"{field} must be a version number or 'draft', got {ref!r}", field=field)
    v = selectors.version_get(environment=env, number=int(ref))
    return f"v{v.number}", v.files


@router.get("/environments/{slug}/versions/{number}/package")
def download_package(request, slug: str, number: int):
    env = selectors.environment_get(team=request.team, slug=slug)
    v = selectors.version_get(environment=env, number=number)
    return package_response(v)


def package_response(version) -> HttpResponse:
    name = f"{version.environment.slug}-v{version.number}"
    response = HttpResponse(package.build_zip(version.files, name), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}.zip"'
    return response


@router.post("/packages", response={201: VersionOut})
def upload_package(request, file: File[UploadedFile], message: Form[str] = "", environment: Form[str] = ""):
    """Upload a zip or tar.gz package; it becomes the next version of the environment named in its
    environment.toml (created if new), or of `environment` (a slug) when given."""
    require(request, "author")
    if file.size > package.MAX_ARCHIVE_BYTES:
        raise services.InvalidInput(
            f"{file.name} is {file.size / 1024 / 1024:.1f} MB, over the 20 MB limit.", field="file"
        )
    env = selectors.environment_get(team=request.team, slug=environment) if environment else None
    v = services.package_import(
        team=request.team, actor=request.user, data=file.read(), filename=file.name or "package",
        message=message, environment=env,
    )
    return Status(201, _version_out(v))


@router.get("/environments/{slug}/versions/{number}/harbor")
def download_harbor_tasks(request, slug: str, number: int, file: str = "zip"):
    """The version as Harbor task folders, one per task (file: zip or tar.gz): task.toml, instruction.md,
    environment/Dockerfile with the package and the studio-env command, tests/test.sh running the
    version's verifier on the agent's episode. A version imported from Harbor gives back its own folders."""
    env = selectors.environment_get(team=request.team, slug=slug)
    return harbor_response(selectors.version_get(environment=env, number=number), file=file)


def harbor_response(version, *, file: str) -> HttpResponse:
    data, name = harbor_services.harbor_export(version=version, file=file)
    response = HttpResponse(data, content_type="application/zip" if file == "zip" else "application/gzip")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@router.post("/harbor/tasks", response={201: VersionOut})
def upload_harbor_tasks(request, file: File[UploadedFile], message: Form[str] = "", environment: Form[str] = ""):
    """Import a Harbor task folder (zip or tar.gz, task.toml at its top) or an archive of several task
    folders as the next version of `environment` (a slug), else of the environment the task's name gives
    (created if new). A malformed folder is a 400 naming the file it lacks; nothing is written then."""
    require(request, "author")
    if file.size > package.MAX_ARCHIVE_BYTES:
        raise services.InvalidInput(f"{file.name} is {file.size / 1024 / 1024:.1f} MB, over the 20 MB limit.", field="file")
    env = selectors.environment_get(team=request.team, slug=environment) if environment else None
    v = harbor_services.harbor_import(team=request.team, actor=request.user, data=file.read(),
                                      filename=file.name or "harbor-tasks", message=message, environment=env)
    return Status(201, _version_out(v))
