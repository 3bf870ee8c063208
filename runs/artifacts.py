"""Step artifacts (a browser environment's screenshots): files in the media storage, never in the row.

The sandbox hands a screenshot over as {"type": "image/jpeg", "base64": ...}; the worker writes it
under artifacts/rollouts/<id>/ and the step row keeps only the file's name.
"""
import base64
import binascii

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

ARTIFACT_KEY = "artifact_data"  # the transient field of an engine step dict that carries the image
EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png"}
MAX_ARTIFACT_BYTES = 512 * 1024


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
    name = stem or f"{index:05d}"
    return default_storage.save(f"artifacts/rollouts/{rollout_id}/{name}.{extension}", ContentFile(data))


def artifacts_store_for_steps(rollout_id: int, steps: list[dict]) -> None:
    """Replace each step's transient image with the stored file's name (`artifact`) and its URL."""
    for step in steps:
        artifact = step.pop(ARTIFACT_KEY, None)
        if artifact is None:
            continue
        name = artifact_store(rollout_id=rollout_id, index=step["index"], artifact=artifact)
        if name:
            step["artifact"] = name
            step["artifact_url"] = default_storage.url(name)


def artifact_url(name: str | None) -> str | None:
    """Where viewers fetch a stored artifact (None for none)."""
    return default_storage.url(name) if name else None
