from datetime import datetime

from ninja import Field, Schema


class EnvironmentIn(Schema):
    name: str = Field(..., min_length=1, max_length=120)
    slug: str = Field("", max_length=80)
    description: str = ""
    kind: str = "python"


class EnvironmentPatch(Schema):
    name: str | None = Field(None, min_length=1, max_length=120)
    description: str | None = None


class EnvironmentOut(Schema):
    slug: str
    name: str
    description: str
    kind: str
    latest_version: int | None
    draft_revision: int
    created_at: datetime
    updated_at: datetime


class DraftOut(Schema):
    revision: int
    based_on: int | None
    files: dict[str, str]


class DraftMetaOut(Schema):
    revision: int
    paths: list[str]


class FileSave(Schema):
    content: str
    revision: int = Field(..., ge=1, description="The draft revision your edit is based on.")


class FileAdd(Schema):
    path: str = Field(..., min_length=1, max_length=200)
    content: str = ""
    revision: int = Field(..., ge=1)


class FileRename(Schema):
    path: str = Field(..., min_length=1)
    new_path: str = Field(..., min_length=1, max_length=200)
    revision: int = Field(..., ge=1)


class DraftReset(Schema):
    version: int = Field(..., ge=1)
    revision: int | None = Field(None, ge=1)


class VersionIn(Schema):
    message: str = Field(..., min_length=1, max_length=500)
    revision: int | None = Field(None, ge=1, description="Refuse if the draft moved past this revision.")


class VersionOut(Schema):
    environment: str
    number: int
    label: str
    parent: int | None
    content_hash: str
    author: str | None
    message: str
    created_at: datetime
    paths: list[str]


class EntrypointCheckOut(Schema):
    ok: bool
    message: str


class DependenciesOut(Schema):
    """A version's dependency environment (shared by versions with the same requirement set)."""

    sha256: str
    requirements: list[str] = Field(..., description="The version's own requirements, normalized.")
    base_requirements: list[str] = Field(..., description="The studio's pinned numpy and Gymnasium.")
    python: str
    status: str = Field(..., description="building, ready or failed")
    error: str = Field(..., description="Why the build failed (empty otherwise).")
    log: str = Field(..., description="uv's output of the build.")
    build_seconds: float | None
    started_at: datetime | None
    finished_at: datetime | None
    entrypoint_check: EntrypointCheckOut | None = Field(
        None, description="The gymnasium entrypoint, made and reset inside the environment."
    )
    entrypoint_check_pending: bool
    refusal: str | None = Field(None, description="Why runs of this version are refused now (null: it can run).")


class VersionDetailOut(VersionOut):
    manifest: dict
    files: dict[str, str]
    dependencies: DependenciesOut | None = Field(None, description="null: the version declares no dependencies.")


class FileDiffOut(Schema):
    path: str
    status: str
    added: int
    removed: int
    diff: str


class DiffOut(Schema):
    old: str
    new: str
    files: list[FileDiffOut]
