"""Parquet beside JSON lines: the same rows as the JSONL export, with one fixed Arrow schema per
format, so every file of a format has the same columns and types whatever its rollouts hold.

Values whose shape is the environment's (observations, actions, step info, tool-call arguments in
object mode, tool parameters) are Arrow JSON columns: `datasets` reads them back as Python objects.
The file is streamed: one row group per batch of rows, its bytes handed on as soon as written.
"""
import json
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_GROUP = 500

_LABEL = pa.struct([("value", pa.float64()), ("decision", pa.string()), ("source", pa.string())])
_LABEL_BY = pa.struct([("reviewer", pa.string()), ("rationale", pa.string()), ("at", pa.string())])
_ANNOTATION = pa.struct([("step", pa.int64()), ("text", pa.string()), ("tags", pa.list_(pa.string())),
                         ("author", pa.string()), ("at", pa.string())])
_AGENT = pa.struct([("name", pa.string()), ("kind", pa.string()), ("code_hash", pa.string())])
_STEP = pa.struct([
    ("index", pa.int64()), ("action", pa.json_()), ("observation", pa.json_()), ("reward", pa.float64()),
    ("terminated", pa.bool_()), ("truncated", pa.bool_()), ("info", pa.json_()),
])
TRAJECTORY_SCHEMA = pa.schema([
    ("environment", pa.string()), ("version", pa.string()), ("content_hash", pa.string()), ("agent", _AGENT),
    ("rollout_id", pa.int64()), ("run_id", pa.int64()), ("task_id", pa.string()), ("seed", pa.int64()),
    ("repeat", pa.int64()), ("status", pa.string()), ("end_reason", pa.string()), ("total_reward", pa.float64()),
    ("verifier_reward", pa.float64()), ("verifier_reason", pa.string()), ("label", _LABEL), ("label_by", _LABEL_BY),
    ("annotations", pa.list_(_ANNOTATION)), ("initial_observation", pa.json_()), ("steps", pa.list_(_STEP)),
])


def chat_schema(arguments: str) -> pa.Schema:
    """The chat rows' schema; tool-call arguments are a JSON column (object mode) or text (string mode)."""
    call = pa.struct([
        ("id", pa.string()), ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.json_() if arguments == "object" else pa.string())])),
    ])
    message = pa.struct([
        ("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(call)), ("tool_call_id", pa.string()),
    ])
    tool = pa.struct([
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("description", pa.string()), ("parameters", pa.json_())])),
    ])
    metadata = pa.struct([
        ("environment", pa.string()), ("version", pa.string()), ("content_hash", pa.string()), ("agent", pa.string()),
        ("agent_kind", pa.string()), ("rollout_id", pa.int64()), ("run_id", pa.int64()), ("task_id", pa.string()),
        ("seed", pa.int64()), ("status", pa.string()), ("end_reason", pa.string()), ("verifier_reward", pa.float64()),
        ("verifier_reason", pa.string()), ("label", pa.struct([("value", pa.float64()), ("decision", pa.string())])),
        ("tags", pa.list_(pa.string())), ("transcript", pa.string()), ("error_steps", pa.list_(pa.int64())),
    ])
    return pa.schema([("messages", pa.list_(message)), ("tools", pa.list_(tool)), ("reward", pa.float64()),
                      ("metadata", metadata)])


def schema_for(fmt: str, arguments: str = "object") -> pa.Schema:
    return TRAJECTORY_SCHEMA if fmt == "trajectory" else chat_schema(arguments)


def _arrow_value(value, arrow_type: pa.DataType):
    """A parsed JSON value shaped for `arrow_type`: JSON columns get JSON text, structs and lists recurse."""
    if value is None:
        return None
    if isinstance(arrow_type, pa.JsonType):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if pa.types.is_struct(arrow_type):
        return {field.name: _arrow_value(value.get(field.name), field.type) for field in arrow_type}
    if pa.types.is_list(arrow_type):
        return [_arrow_value(item, arrow_type.value_type) for item in value]
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_string(arrow_type) and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return value


def _storage_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type with JSON columns as plain strings: Python values convert to it, then cast to JSON."""
    if isinstance(arrow_type, pa.JsonType):
        return pa.string()
    if pa.types.is_struct(arrow_type):
        return pa.struct([pa.field(field.name, _storage_type(field.type)) for field in arrow_type])
    if pa.types.is_list(arrow_type):
        return pa.list_(_storage_type(arrow_type.value_type))
    return arrow_type


def _column(values: list, arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=_storage_type(arrow_type)).cast(arrow_type)


class _Sink:
    """A write-only file that keeps what was written until it is drained."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.closed = False
        self.position = 0

    def write(self, data) -> int:
        data = bytes(data)
        self.parts.append(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def drain(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def parquet_chunks(lines: Iterable[str], *, fmt: str, arguments: str = "object") -> Iterator[bytes]:
    """The Parquet file of these JSONL export lines, as byte chunks (a valid file with no rows when empty)."""
    schema = schema_for(fmt, arguments)
    sink = _Sink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    batch: list[dict] = []

    def write_batch():
        columns = {field.name: [_arrow_value(row.get(field.name), field.type) for row in batch] for field in schema}
        writer.write_table(pa.table({name: _column(values, schema.field(name).type) for name, values in columns.items()},
                                    schema=schema))
        batch.clear()

    for line in lines:
        batch.append(json.loads(line))
        if len(batch) >= ROWS_PER_GROUP:
            write_batch()
            yield sink.drain()
    if batch:
        write_batch()
    writer.close()
    yield sink.drain()
