"""The export as an HTTP download, one definition for the pages and the API: JSON lines or Parquet,
streamed, or an Inspect AI log, with the number of rollouts it holds in `X-Export-Count`."""
from django.http import StreamingHttpResponse

from environments.models import EnvironmentVersion

from ..interop import INSPECT_MISSING, inspect_installed
from ..quality.gate import VersionGated, gate_state, gated_versions
from .export import EXPORT_FORMATS, ExportFilter, InvalidExport, export_count, export_lines
from .export_parquet import parquet_chunks

EXPORT_FILES = ("jsonl", "parquet")
# "inspect": an Inspect AI .json log of the chat transcripts (a file type of its own).
DOWNLOAD_FORMATS = (*EXPORT_FORMATS, "inspect")
CONTENT_TYPES = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


def export_refusal(rollouts) -> str:
    """Why these rollouts may not leave as training data ("" when they may): the team's training gate keeps
    a flagged version's rollouts in until someone overrides it (runs.quality.gate)."""
    # Only versions of teams whose gate is on, and only what the gate reads (never a version's files).
    versions = EnvironmentVersion.objects.filter(
        pk__in=rollouts.values("run__environment_version_id"), environment__team__training_gate=True,
    ).select_related("environment__team").only(
        "id", "number", "environment__id", "environment__slug", "environment__team__id", "environment__team__training_gate")
    gated = gated_versions(versions=versions)
    return gate_state(version=gated[0])["message"] if gated else ""


def export_response(rollouts, *, filters: ExportFilter, fmt: str, arguments: str, file: str, filename: str,
                    viewer=None, count: int | None = None) -> StreamingHttpResponse:
    """`viewer`: the member downloading (labels as they may see them, blind review kept)."""
    if fmt not in DOWNLOAD_FORMATS:
        raise InvalidExport(f"format must be one of {', '.join(DOWNLOAD_FORMATS)}, not {fmt!r}", field="format")
    if file not in EXPORT_FILES:
        raise InvalidExport(f"file must be one of {', '.join(EXPORT_FILES)}, not {file!r}", field="file")
    if fmt == "inspect" and file != "jsonl":
        raise InvalidExport("an Inspect log is a .json file of its own: leave file at jsonl", field="file")
    if fmt == "inspect" and not inspect_installed():
        raise InvalidExport(INSPECT_MISSING, field="format")
    if fmt == "atif" and file != "jsonl":
        raise InvalidExport("ATIF trajectories are JSON documents, one a line: leave file at jsonl", field="file")
    if refusal := export_refusal(rollouts):
        raise VersionGated(refusal)
    count = export_count(rollouts, filters=filters, viewer=viewer) if count is None else count
    if fmt == "inspect":
        from runs.interop.inspect_log import inspect_log_bytes  # Inspect is a large import: only when asked

        response = StreamingHttpResponse([inspect_log_bytes(rollouts, filters=filters, viewer=viewer)], content_type="application/json")
        extension = "json"
    else:
        lines = export_lines(rollouts, filters=filters, fmt=fmt, arguments=arguments, viewer=viewer)
        body = parquet_chunks(lines, fmt=fmt, arguments=arguments) if file == "parquet" else lines
        response = StreamingHttpResponse(body, content_type=CONTENT_TYPES[file])
        extension = file
    suffix = "" if fmt == "trajectory" else f"-{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{filename}-{filters.decision}{suffix}.{extension}"'
    response["X-Export-Count"] = str(count)
    return response
