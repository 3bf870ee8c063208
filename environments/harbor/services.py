"""Harbor task folders in and out of the studio: a version's tasks as a Harbor archive, a Harbor
archive as a new version (environments/harbor/tasks.py does the conversions)."""
from pathlib import PurePosixPath

from .. import package
from ..services import InvalidInput, InvalidVersion, package_files_import
from . import tasks


def harbor_export(*, version, file: str = "zip") -> tuple[bytes, str]:
    """(archive bytes, file name) of the version as Harbor task folders; InvalidInput when it cannot be."""
    if file not in tasks.ARCHIVE_FILES:
        raise InvalidInput(f"file must be one of {', '.join(tasks.ARCHIVE_FILES)}, not {file!r}", field="file")
    env = version.environment
    try:
        files = tasks.harbor_task_files(
            slug=env.slug, label=version.label, content_hash=version.content_hash, files=version.files,
            manifest=version.manifest, tasks=version.tasks, description=env.description,
        )
    except tasks.NotExportable as exc:
        raise InvalidInput(str(exc), field="version") from None
    root = f"{env.slug}-v{version.number}-harbor"
    return tasks.harbor_archive(files, root=root, file=file), f"{root}.{file}"


def harbor_import(*, team, actor, data: bytes, filename: str, message: str = "", environment=None):
    """A Harbor task folder, or an archive of several, as the next version of `environment` (else of the
    environment its name gives, created if new). A malformed folder is refused naming what it lacks;
    nothing is written then."""
    try:
        files = package.read_archive(data, filename)
        stem = PurePosixPath(filename or "harbor-tasks").name.split(".")[0] or "harbor-tasks"
        studio_files = tasks.studio_package_from_harbor(files, fallback_name=stem)
    except package.InvalidPackage as exc:
        raise InvalidVersion([package.PackageProblem(exc.file or filename, exc.line, exc.reason)]) from None
    return package_files_import(team=team, actor=actor, files=studio_files,
                                message=message or f"Imported Harbor tasks from {filename}", environment=environment)
