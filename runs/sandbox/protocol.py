"""The sandbox protocol: newline-delimited JSON between the worker and the runner inside a sandbox,
with numpy arrays as raw binary frames beside the JSON.

Both sides import this one module: the runner loads it stand-alone (Debian's /usr/bin/python3, no
Django, no third-party packages), the host as `runs.sandbox.protocol`. Keep it standard-library only
(numpy is used when it is importable, never required).

Requests (worker -> runner), one JSON object a line:
    {"op": "load", "mode": "env"|"agent", "entrypoint": "env:MyEnv", "limits": {...},
     "seed_secret": "..."}                              env mode only: the version's seed secret
    {"op": "reset", "task": {...}, "seed": 0}
    {"op": "step", "action": ...}                       env mode
    {"op": "verify"}                                    env mode
    {"op": "act", "observation": ..., "info": {...}}    agent mode; "space": {"action_space", "tools"}
                                                        for an agent module with observe_space()
    {"op": "end", "episode": "e1"}                      env mode: close and drop that episode's instance
    {"op": "close"}
Responses (runner -> worker):
    {"ok": true, "result": ...}
    {"ok": false, "error": "ValueError: bad action (env.py line 12)", "kind": "exception"}

Shared sandboxes (environment.toml `concurrent_sessions` > 1): reset, step and verify may carry
"episode": "<id>"; the runner then keeps one instance of the entrypoint class per episode id, made on
that episode's first reset, until "end". Requests without "episode" use the instance made at load.

Arrays (either direction): a message holding numpy arrays is sent as a header line
`#<n0>,<n1>,...\n`, the JSON line, then the arrays' raw bytes (C order, little-endian), n0 bytes,
n1 bytes, ... In the JSON each array is `{"__ndarray__": {"dtype": "uint8", "shape": [210, 160, 3],
"frame": k}}`; decoding puts the array back (numpy when importable, nested lists otherwise).
No per-element walk on either side: encoding hands the array's buffer over, decoding wraps it.

Floats JSON cannot carry: NaN, infinities and -0.0 travel as `{"__float__": "nan" | "inf" | "-inf" |
"-0.0"}` (studio_sdk.jsonable writes them); `decode(..., floats=True)` turns them back into floats
(the runner does, for user code); the worker keeps them as they are, which is also how they are
stored and served by the API.
"""

import json
import math

OPS = ("load", "reset", "step", "verify", "act", "end", "close")
MODES = ("env", "agent")

# Error kinds a runner may answer with.
KIND_EXCEPTION = "exception"  # user code raised; the sandbox is still usable
KIND_CONTRACT = "contract"  # user code returned something the contract does not allow
KIND_PROTOCOL = "protocol"  # a malformed or out-of-order request
KIND_LIMIT = "limit"  # a result too large to send

MAX_INFO_BYTES = 256 * 1024
# Whole-line ceiling: a request or response longer than this is a protocol violation.
MAX_LINE_BYTES = 16 * 1024 * 1024
# Ceiling on one message's binary frames (arrays), whatever a version's observation limit says.
MAX_FRAME_BYTES = 512 * 1024 * 1024
MAX_FRAMES = 4096
MAX_EPISODE_ID_CHARS = 200
EPISODE_OPS = ("reset", "step", "verify", "end")

ARRAY_KEY = "__ndarray__"
FLOAT_KEY = "__float__"
# The dtypes that travel as frames: booleans, signed and unsigned integers, floats.
ARRAY_KINDS = "biuf"
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-0.0": -0.0}


class ProtocolError(ValueError):
    """A line that is not a valid protocol message."""


class FramingError(ProtocolError):
    """The stream itself is broken (a line too long or cut short): nothing after it can be trusted."""


def float_envelope(value):
    """A float JSON cannot carry exactly as `{"__float__": ...}`; None for any other float."""
    if value != value:
        return {FLOAT_KEY: "nan"}
    if value in (math.inf, -math.inf):
        return {FLOAT_KEY: "inf" if value > 0 else "-inf"}
    if value == 0.0 and math.copysign(1.0, value) < 0:
        return {FLOAT_KEY: "-0.0"}
    return None


def is_wire_array(value):
    """A numpy array that travels as a binary frame (numeric or boolean dtype)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and hasattr(value, "tobytes") and hasattr(value, "shape") and getattr(dtype, "kind", "") in ARRAY_KINDS


def array_header(array):
    """The dtype name and shape of a wire array (numpy names: "uint8", "float32")."""
    return {"dtype": array.dtype.name, "shape": list(array.shape)}


def array_bytes(array):
    """The raw bytes of an array in C order, little-endian (no copy when it already is)."""
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags["C_CONTIGUOUS"]:
        array = array.copy(order="C")
    return memoryview(array).cast("B") if array.size else b""


def array_from_bytes(data, dtype, shape):
    """An array from its raw bytes: a writable numpy array, or nested lists where numpy is missing."""
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        try:
            return numpy.frombuffer(bytearray(data), dtype=numpy.dtype(dtype).newbyteorder("<")).astype(dtype, copy=False).reshape(shape)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"bad array frame ({dtype}, shape {shape}): {exc}") from None
    return _lists_from_bytes(data, dtype, shape)


_STRUCT_CODES = {"bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                 "int64": "q", "uint64": "Q", "float32": "f", "float64": "d", "float16": "e"}


def _lists_from_bytes(data, dtype, shape):
    import struct

    code = _STRUCT_CODES.get(dtype)
    if code is None:
        raise ProtocolError(f"cannot read an array of dtype {dtype!r} without numpy")
    count = 1
    for size in shape:
        count *= size
    flat = list(struct.unpack(f"<{count}{code}", bytes(data)))

    def nest(items, dims):
        if len(dims) <= 1:
            return items
        step = len(items) // dims[0] if dims[0] else 0
        return [nest(items[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]

    return nest(flat, list(shape)) if shape else flat[0]


def encode(message):
    """One message as bytes: its JSON line (newline-terminated), preceded by a frame header line and
    followed by the raw bytes of its arrays when it holds any."""
    frames = []

    def frame(value):
        if is_wire_array(value):
            data = array_bytes(value)
            frames.append(data)
            return {ARRAY_KEY: {**array_header(value), "frame": len(frames) - 1}}
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    line = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=frame).encode("utf-8")
    if len(line) >= MAX_LINE_BYTES:
        raise ProtocolError(f"message is {len(line)} bytes, over the {MAX_LINE_BYTES} byte line limit")
    if not frames:
        return line + b"\n"
    sizes = [len(data) if isinstance(data, bytes) else data.nbytes for data in frames]
    if sum(sizes) > MAX_FRAME_BYTES:
        raise ProtocolError(f"arrays are {sum(sizes)} bytes, over the {MAX_FRAME_BYTES} byte limit of a message")
    return b"".join([b"#", ",".join(map(str, sizes)).encode("ascii"), b"\n", line, b"\n", *frames])


def frame_sizes(header):
    """The frame sizes a `#n0,n1,...` header line announces (without its newline)."""
    try:
        sizes = [int(part) for part in bytes(header[1:]).split(b",")]
    except ValueError:
        raise ProtocolError(f"bad frame header {bytes(header[:80])!r}") from None
    if len(sizes) > MAX_FRAMES or any(size < 0 for size in sizes) or sum(sizes) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame header announces {len(sizes)} frames of {sum(sizes)} bytes, over the limits")
    return sizes


def decode(line, frames=(), floats=False):
    """Parse one JSON line (and the frames that came with it) into a dict; raise ProtocolError on
    anything else. `floats=True` also turns `{"__float__": ...}` back into floats."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"line is {len(line)} bytes, over the {MAX_LINE_BYTES} byte line limit")
    hook = None
    if frames or floats:
        def hook(value):
            if len(value) == 1:
                if ARRAY_KEY in value and frames:
                    return _array_of(value[ARRAY_KEY], frames)
                if floats and FLOAT_KEY in value and value[FLOAT_KEY] in _FLOATS:
                    return _FLOATS[value[FLOAT_KEY]]
            return value
    try:
        message = json.loads(line, object_hook=hook)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        preview = bytes(line[:80]) if isinstance(line, (bytes, bytearray, memoryview)) else line[:80]
        raise ProtocolError(f"not a JSON line: {exc} (starts with {preview!r})") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    return message


def _array_of(header, frames):
    if not isinstance(header, dict) or not isinstance(header.get("frame"), int) or not 0 <= header["frame"] < len(frames):
        raise ProtocolError(f"array refers to no frame: {str(header)[:200]}")
    shape = header.get("shape")
    if not isinstance(shape, list) or not all(isinstance(size, int) and size >= 0 for size in shape):
        raise ProtocolError(f"array has a bad shape: {str(shape)[:200]}")
    return array_from_bytes(frames[header["frame"]], str(header.get("dtype")), shape)


def take_message(buffer, floats=False):
    """The first whole message in `buffer` (a bytearray the caller appends to), removed from it;
    None while it is incomplete. For callers that read without blocking."""
    newline = buffer.find(b"\n")
    if newline < 0:
        if len(buffer) > MAX_LINE_BYTES:
            raise ProtocolError(f"a line over {MAX_LINE_BYTES} bytes")
        return None
    if not buffer.startswith(b"#"):
        line = bytes(buffer[:newline])
        del buffer[: newline + 1]
        return decode(line, floats=floats)
    sizes = frame_sizes(buffer[:newline])
    end = buffer.find(b"\n", newline + 1)
    if end < 0:
        if len(buffer) - newline > MAX_LINE_BYTES:
            raise ProtocolError(f"a line over {MAX_LINE_BYTES} bytes")
        return None
    if len(buffer) < end + 1 + sum(sizes):
        return None
    line = bytes(buffer[newline + 1:end])
    frames, offset = [], end + 1
    view = memoryview(buffer)
    try:
        for size in sizes:
            frames.append(view[offset:offset + size])
            offset += size
        message = decode(line, frames, floats=floats)
    finally:
        frames.clear()
        view.release()
    del buffer[:offset]
    return message


def read_message(reader, floats=False):
    """The next message from a blocking binary reader; None at end of input. ProtocolError for a
    line that is too long or cut short."""
    line = reader.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise FramingError("request line too long or cut short")
    if not line.startswith(b"#"):
        return decode(line, floats=floats)
    try:
        sizes = frame_sizes(line[:-1])
    except ProtocolError as exc:
        raise FramingError(str(exc)) from None
    line = reader.readline(MAX_LINE_BYTES + 1)
    if not line.endswith(b"\n"):
        raise FramingError("request line too long or cut short")
    frames = []
    for size in sizes:
        data = reader.read(size)
        if len(data) != size:
            raise FramingError("array frame cut short")
        frames.append(data)
    return decode(line, frames, floats=floats)


def request(op, **fields):
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r}")
    return {"op": op, **fields}


def ok(result=None):
    return {"ok": True, "result": result}


def error(message, kind=KIND_EXCEPTION):
    return {"ok": False, "error": str(message), "kind": kind}


def encoded_size(value):
    """Bytes the value takes on the wire: its JSON plus the raw bytes of its arrays."""
    arrays = 0

    def count(item):
        nonlocal arrays
        if is_wire_array(item):
            arrays += item.nbytes
            return 0
        raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")

    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=count)
    return len(text.encode("utf-8")) + arrays


def over_limit(size, limit, what="observation"):
    """The readable reason a value of `size` bytes is refused, or None when it fits."""
    if size <= limit:
        return None
    return f"{what} is {size / 1e6:.1f} MB, over the limit of {limit / 1e6:g} MB"
