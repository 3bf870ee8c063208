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


class VersionDetailOut(VersionOut):
    manifest: dict
    files: dict[str, str]


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
