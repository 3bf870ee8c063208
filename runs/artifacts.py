"""Step artifacts (a browser environment's screenshots): files in the artifact storage, never in the row.

The sandbox hands a screenshot over as {"type": "image/jpeg", "base64": ...}; the worker writes it
through Django's storage API (`storages["artifacts"]`: MEDIA_ROOT, or an S3-compatible bucket, see
`artifact_storage` in studio/settings.py) as artifacts/rollouts/<id>/<name>, and the step row keeps
only that name. Web processes read it back through the same storage and serve it only to members
of the rollout's team (runs/views.py `artifact_serve`); `artifact_url` is the one shape of its URL.
"""
import base64
import binascii
import re

from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, storages
from django.urls import reverse
from storages.backends.s3 import S3Storage

ARTIFACT_KEY = "artifact_data"  # the transient field of an engine step dict that carries the image
EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png"}
CONTENT_TYPES = {extension: content_type for content_type, extension in EXTENSIONS.items()}
MAX_ARTIFACT_BYTES = 512 * 1024

# A file name the writer can produce ("00007.jpg", "reset.png", or a storage's de-duplicated "00007_a1B2c3.jpg").
FILENAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
NAME = re.compile(rf"artifacts/rollouts/(?P<rollout_id>[0-9]+)/(?P<filename>{FILENAME.pattern})")


class ArtifactNotFound(LookupError):
    pass


def artifact_storage():
    return storages["artifacts"]


def artifact_name(*, rollout_id: int, filename: str) -> str:
    """The storage name of one of a rollout's artifacts; everything under it belongs to that rollout."""
    if not FILENAME.fullmatch(filename):
        raise ArtifactNotFound(filename)
    return f"artifacts/rollouts/{int(rollout_id)}/{filename}"


def artifact_url(name: str | None) -> str | None:
    """The URL of a stored artifact (None for none): the team-checked view, whatever the backend."""
    if not name:
        return None
    match = NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a rollout artifact: {name!r}")
    return reverse("artifact", kwargs={"rollout_id": int(match["rollout_id"]), "filename": match["filename"]})


def artifact_read(*, rollout_id: int, filename: str) -> tuple[bytes, str]:
    """An artifact's bytes and content type from the storage; ArtifactNotFound if there is none.
    The caller has checked that the rollout is the reader's team's."""
    name = artifact_name(rollout_id=rollout_id, filename=filename)
    content_type = CONTENT_TYPES.get(filename.rpartition(".")[2])
    if content_type is None:
        raise ArtifactNotFound(name)
    try:
        with artifact_storage().open(name, "rb") as file:
            # Whole: artifacts are capped at MAX_ARTIFACT_BYTES, and bytes spare the ASGI server a sync iterator.
            return file.read(), content_type
    except FileNotFoundError:
        raise ArtifactNotFound(name) from None


def artifact_store(*, rollout_id: int, index: int, artifact: dict | None, stem: str = "") -> str | None:
    """Save one step's artifact (`stem` names a non-step one, e.g. "reset"); returns the storage name,
    or None for nothing usable."""
    if not isinstance(artifact, dict):
        return None
    extension = EXTENSIONS.get(artifact.get("type"))
    try:
        data = base64.b64decode(artifact.get("base64") or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        return None
    if extension is None or not data or len(data) > MAX_ARTIFACT_BYTES:
        return None
    name = artifact_name(rollout_id=rollout_id, filename=f"{stem or f'{index:05d}'}.{extension}")
    return artifact_storage().save(name, ContentFile(data))


def artifacts_store_for_steps(rollout_id: int, steps: list[dict]) -> None:
    """Replace each step's transient image with the stored file's name (`artifact`) and its URL."""
    for step in steps:
        artifact = step.pop(ARTIFACT_KEY, None)
        if artifact is None:
            continue
        name = artifact_store(rollout_id=rollout_id, index=step["index"], artifact=artifact)
        if name:
            step["artifact"] = name
            step["artifact_url"] = artifact_url(name)


class _ServedByTheStudio:
    """url() is the team-checked view's: a backend's own URL (a public path, a presigned link that
    anyone holding it can open) is never handed out, whoever asks (FileField.url, older callers)."""

    def url(self, name):
        return artifact_url(name)


class FileSystemArtifactStorage(_ServedByTheStudio, FileSystemStorage):
    pass


class S3ArtifactStorage(_ServedByTheStudio, S3Storage):
    pass
