"""Step artifacts (a browser environment's screenshots, an observation's arrays): files in the
artifact storage, never in the row.

The sandbox hands a screenshot over as {"type": "image/jpeg", "base64": ...}; the worker writes it
through Django's storage API (`storages["artifacts"]`: MEDIA_ROOT, or an S3-compatible bucket, see
`artifact_storage` in studio/settings.py) as artifacts/rollouts/<id>/<name>, and the step row keeps
only that name. Web processes read it back through the same storage and serve it only to members
of the rollout's team (runs/views.py `artifact_serve`); `artifact_url` is the one shape of its URL.
"""
import base64
import binascii
import hashlib
import io
import re
import struct
import zlib

import numpy

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
    """Replace each step's transient image with the stored file's name (`artifact`) and its URL, and
    its observation's and info's arrays with references to their stored files (new values: the
    episode's own observation and info, which the agent gets, keep their arrays)."""
    for step in steps:
        if _may_hold_arrays(step.get("observation")):
            step["observation"] = arrays_store(rollout_id=rollout_id, stem=f"{step['index']:05d}", value=step["observation"])
        if _holds_arrays(step.get("info")):
            step["info"] = arrays_store(rollout_id=rollout_id, stem=f"{step['index']:05d}-info", value=step["info"])
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


# -- arrays in observations ------------------------------------------------------------------------
#
# An observation's numpy arrays (they cross the sandbox boundary as binary frames) are stored beside
# the step, never in its JSON: image-like arrays (uint8, HxW, HxWx1, HxWx3, HxWx4) as PNG files the
# replay shows, others as compressed .npz. Small arrays (INLINE_ARRAY_BYTES) stay in the row. Each
# form is one JSON object, `{"__ndarray__": {"dtype": "uint8", "shape": [210, 160, 3], ...}}` with:
#   "artifact": "00007.o0.png"  stored (the row's form); served with "url" added (API, pages)
#   "data": [[1, 2], [3, 4]]     small arrays of finite values, inline
#   "base64": "..."              raw bytes (C order, little-endian), inline: session replies, exports
# Floats JSON cannot carry are `{"__float__": "nan" | "inf" | "-inf" | "-0.0"}` everywhere.

ARRAY_KEY = "__ndarray__"
FLOAT_KEY = "__float__"
INLINE_ARRAY_BYTES = 4096
CONTENT_TYPES["npz"] = "application/octet-stream"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type (grey, grey+alpha, RGB, RGBA)


def is_image(array) -> bool:
    """Whether an array looks like an image: uint8, HxW or HxWxC with C in 1..4."""
    return array.dtype == numpy.uint8 and (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in _PNG_COLOR_TYPES)) \
        and array.shape[0] > 0 and array.shape[1] > 0


def png_bytes(image) -> bytes:
    """A PNG of an image-like array. Each row is stored as its difference from the row above (PNG's
    "Up" filter), which game frames compress best with; zlib's fastest level (a game frame is ~1 KB
    at level 1, ~0.6 KB at level 6, for a third of the time)."""
    height, width = image.shape[:2]
    channels = 1 if image.ndim == 2 else image.shape[2]
    rows = numpy.ascontiguousarray(image).reshape(height, width * channels)
    raw = numpy.empty((height, width * channels + 1), dtype=numpy.uint8)
    raw[:, 0] = 2
    raw[0, 1:] = rows[0]
    numpy.subtract(rows[1:], rows[:-1], out=raw[1:, 1:])
    header = struct.pack(">IIBBBBB", width, height, 8, _PNG_COLOR_TYPES[channels], 0, 0, 0)
    return PNG_SIGNATURE + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(raw.tobytes(), 1)) + _png_chunk(b"IEND", b"")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_array(data: bytes, *, shape: list[int]):
    """The array back from a PNG that png_bytes wrote (filters None and Up only)."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    offset, idat, header = len(PNG_SIGNATURE), [], None
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kind, body = data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        raise ValueError("PNG without a header")
    width, height, channels = header[0], header[1], {v: k for k, v in _PNG_COLOR_TYPES.items()}[header[3]]
    raw = numpy.frombuffer(zlib.decompress(b"".join(idat)), dtype=numpy.uint8).reshape(height, width * channels + 1)
    filters, rows = raw[:, 0], raw[:, 1:]
    if filters.any() and not (filters == 2).all():
        raise ValueError("PNG rows use filters this reader does not know")
    if filters.any():
        rows = numpy.cumsum(rows, axis=0, dtype=numpy.uint8)
    return rows.reshape(shape).copy()


def array_json(array, *, inline_bytes: int | None = None) -> dict:
    """An array as its inline JSON form: "data" when it is small and every value is a JSON number,
    "base64" of its raw bytes otherwise."""
    header = {"dtype": array.dtype.name, "shape": list(array.shape)}
    limit = INLINE_ARRAY_BYTES if inline_bytes is None else inline_bytes
    if array.nbytes <= limit and _json_exact(array):
        return {ARRAY_KEY: {**header, "data": array.tolist()}}
    data = numpy.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return {ARRAY_KEY: {**header, "base64": base64.b64encode(data).decode("ascii")}}


def _json_exact(array) -> bool:
    if array.dtype.kind != "f":
        return True
    return bool(numpy.isfinite(array).all()) and not bool((numpy.signbit(array) & (array == 0)).any())


def array_json_default(value):
    """A `default=` hook for json.dumps: arrays become their inline JSON form (session replies, journals)."""
    if isinstance(value, numpy.ndarray):
        return array_json(value)
    if isinstance(value, numpy.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def array_from_json(envelope: dict):
    """The array an inline JSON form ("data" or "base64") holds."""
    dtype, shape = numpy.dtype(envelope["dtype"]), tuple(envelope["shape"])
    if "base64" in envelope:
        return numpy.frombuffer(base64.b64decode(envelope["base64"]), dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
    return numpy.asarray(envelope["data"], dtype=dtype).reshape(shape)


def _map_arrays(value, convert):
    """`value` with every array (numpy, or a `__ndarray__` form) replaced by convert(array or form)."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(ARRAY_KEY), dict):
            return convert(value[ARRAY_KEY])
        return {key: _map_arrays(item, convert) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_arrays(item, convert) for item in value]
    if isinstance(value, numpy.ndarray):
        return convert(value)
    return value


def arrays_store(*, rollout_id: int, stem: str, value):
    """`value` as a step row keeps it: its large arrays saved to the artifact storage (PNG or .npz),
    each replaced by a reference; small ones inline."""
    count = 0

    def store(array):
        nonlocal count
        if isinstance(array, dict):
            if "base64" not in array and "data" not in array:
                return {ARRAY_KEY: array}  # already stored
            array = array_from_json(array)
        if array.nbytes <= INLINE_ARRAY_BYTES:
            return array_json(array)
        if is_image(array):
            extension, data = "png", png_bytes(array)
        else:
            buffer = io.BytesIO()
            numpy.savez_compressed(buffer, array=array)
            extension, data = "npz", buffer.getvalue()
        name = artifact_name(rollout_id=rollout_id, filename=f"{stem}.o{count}.{extension}")
        count += 1
        saved = artifact_storage().save(name, ContentFile(data))
        return {ARRAY_KEY: {"dtype": array.dtype.name, "shape": list(array.shape), "sha256": array_digest(array),
                            "artifact": saved.rpartition("/")[2]}}

    return _map_arrays(value, store)


def array_digest(array) -> str:
    """sha256 of an array's raw bytes (C order, little-endian): a stored array's envelope carries it,
    so two stored trajectories compare equal only when their arrays are (file names never differ)."""
    data = numpy.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return hashlib.sha256(memoryview(data).cast("B") if data.size else b"").hexdigest()


def arrays_fingerprint(value):
    """`value` with every array (numpy, inline or stored form) as {dtype, shape, sha256}: what
    compares an observation fresh from a sandbox with a stored one (a replay's divergence check)."""
    if not _may_hold_arrays(value):
        return value

    def fingerprint(array):
        if isinstance(array, dict):
            if "sha256" in array:
                return {ARRAY_KEY: {"dtype": array["dtype"], "shape": list(array["shape"]), "sha256": array["sha256"]}}
            if "base64" not in array and "data" not in array:
                return {ARRAY_KEY: array}  # stored before digests were kept: compares by its form
            array = array_from_json(array)
        return {ARRAY_KEY: {"dtype": array.dtype.name, "shape": list(array.shape), "sha256": array_digest(array)}}

    return _map_arrays(value, fingerprint)


def arrays_public(value, *, rollout_id: int):
    """A stored value as the API and pages serve it: each stored array gets the team-checked "url" of
    its file (image-like ones are PNGs a page can show as they are)."""
    if not _may_hold_arrays(value):
        return value

    def public(envelope):
        if isinstance(envelope, dict) and "artifact" in envelope:
            name = artifact_name(rollout_id=rollout_id, filename=envelope["artifact"])
            return {ARRAY_KEY: {**envelope, "url": artifact_url(name)}}
        return {ARRAY_KEY: envelope} if isinstance(envelope, dict) else array_json(envelope)

    return _map_arrays(value, public)


def arrays_inline(value, *, rollout_id: int):
    """A stored value with every array inline ("data" or "base64"): what exports carry, so a
    trajectory file holds the very arrays the agent saw."""
    if not _may_hold_arrays(value):
        return value

    def inline(envelope):
        if isinstance(envelope, dict) and "artifact" in envelope:
            return array_json(array_load(rollout_id=rollout_id, envelope=envelope))
        return {ARRAY_KEY: envelope} if isinstance(envelope, dict) else array_json(envelope)

    return _map_arrays(value, inline)


def array_load(*, rollout_id: int, envelope: dict):
    """A stored array read back from the artifact storage."""
    data, _ = artifact_read(rollout_id=rollout_id, filename=envelope["artifact"])
    if envelope["artifact"].endswith(".png"):
        return png_array(data, shape=envelope["shape"])
    with numpy.load(io.BytesIO(data), allow_pickle=False) as archive:
        return archive["array"]


def _may_hold_arrays(value) -> bool:
    return isinstance(value, (dict, list, numpy.ndarray))


def _holds_arrays(value) -> bool:
    """Whether a value holds a numpy array anywhere (info dicts rarely do: most are left as they are)."""
    if isinstance(value, numpy.ndarray):
        return True
    if isinstance(value, dict):
        return any(_holds_arrays(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_arrays(item) for item in value)
    return False
