"""How the studio_client distribution is built: its PEP 517 build backend, standard library only.

This directory is the whole project: `pyproject.toml` (name, dependencies, extras) beside the
package's modules, and `__init__.py`'s `__version__` is the version. The studio serves what this
module builds (`/client/python`: the sdist, which pip builds with this same backend, needing nothing
from an index; `/client/python/<wheel name>`: the wheel), and `pip install ./studio_client` from a
checkout builds through it too, so there is one builder. It has no build requirements, so an install
works offline; the output is byte-for-byte the same for the same sources (fixed timestamps, sorted
entries). This module is the build's and is left out of the wheel.
"""
import ast
import base64
import gzip
import hashlib
import io
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent
PACKAGE = "studio_client"
BACKEND_FILE = "distribution.py"
# 1980-01-01, the earliest time a zip entry can carry: every build of the same sources is the same bytes.
EPOCH = 315532800
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
WHEEL_TAG = "py3-none-any"


class BuildError(Exception):
    """The project cannot be built as it is (says which file and what is wrong)."""


def project(source: Path = SOURCE) -> dict:
    """pyproject.toml's [project] table, its version filled in from `__init__.py`'s `__version__`."""
    try:
        table = dict(tomllib.loads((source / "pyproject.toml").read_text())["project"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise BuildError(f"{source / 'pyproject.toml'}: no readable [project] table ({exc})") from exc
    if "version" not in table:
        table["version"] = package_version(source)
    return table


def package_version(source: Path = SOURCE) -> str:
    init = source / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if (isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == ["__version__"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    raise BuildError(f"{init}: no `__version__ = \"X.Y.Z\"` line")


def metadata_text(table: dict) -> str:
    """The core metadata (METADATA in the wheel, PKG-INFO in the sdist)."""
    lines = ["Metadata-Version: 2.1", f"Name: {table['name']}", f"Version: {table['version']}"]
    if table.get("description"):
        lines.append(f"Summary: {table['description']}")
    if table.get("requires-python"):
        lines.append(f"Requires-Python: {table['requires-python']}")
    if table.get("license"):
        lines.append(f"License: {table['license']}")
    lines += [f"Requires-Dist: {requirement}" for requirement in table.get("dependencies") or []]
    for extra, requirements in (table.get("optional-dependencies") or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {requirement}; extra == "{extra}"' for requirement in requirements]
    return "\n".join(lines) + "\n"


def distribution_name(table: dict) -> str:
    """The name as file names spell it (PEP 427/625: runs of -_. become one underscore)."""
    return re.sub(r"[-_.]+", "_", table["name"]).lower()


def module_files(source: Path = SOURCE) -> list[Path]:
    """The package's modules, sorted (no caches, no build backend)."""
    return sorted(
        path for path in source.rglob("*.py")
        if "__pycache__" not in path.parts and path.relative_to(source).as_posix() != BACKEND_FILE
    )


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def dist_info_files(table: dict) -> dict[str, bytes]:
    """The .dist-info files but RECORD, by their names inside the wheel."""
    folder = f"{distribution_name(table)}-{table['version']}.dist-info"
    wheel = f"Wheel-Version: 1.0\nGenerator: studio_client.distribution\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n"
    return {f"{folder}/METADATA": metadata_text(table).encode(), f"{folder}/WHEEL": wheel.encode()}


def wheel_bytes(source: Path = SOURCE) -> tuple[str, bytes]:
    """(file name, bytes) of the wheel."""
    table = project(source)
    entries = {f"{PACKAGE}/{path.relative_to(source).as_posix()}": path.read_bytes() for path in module_files(source)}
    entries |= dist_info_files(table)
    record_name = f"{distribution_name(table)}-{table['version']}.dist-info/RECORD"
    record = "\n".join([*(record_line(name, data) for name, data in entries.items()), f"{record_name},,"]) + "\n"
    entries[record_name] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return f"{distribution_name(table)}-{table['version']}-{WHEEL_TAG}.whl", buffer.getvalue()


def sdist_bytes(source: Path = SOURCE) -> tuple[str, bytes]:
    """(file name, bytes) of the sdist: this directory as it is, with PKG-INFO."""
    table = project(source)
    root = f"{distribution_name(table)}-{table['version']}"
    entries = {"PKG-INFO": metadata_text(table).encode(), "pyproject.toml": (source / "pyproject.toml").read_bytes(),
               BACKEND_FILE: (source / BACKEND_FILE).read_bytes()}
    entries |= {path.relative_to(source).as_posix(): path.read_bytes() for path in module_files(source)}
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=EPOCH) as compressed:
        with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name in sorted(entries):
                info = tarfile.TarInfo(f"{root}/{name}")
                info.size, info.mtime, info.mode = len(entries[name]), EPOCH, 0o644
                archive.addfile(info, io.BytesIO(entries[name]))
    return f"{root}.tar.gz", buffer.getvalue()


# PEP 517 hooks (pip imports this module from the directory it builds: SOURCE is that directory).

def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings=None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None) -> str:
    table = project()
    files = dist_info_files(table)
    for name, data in files.items():
        target = Path(metadata_directory) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return next(iter(files)).split("/")[0]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    name, data = wheel_bytes()
    (Path(wheel_directory) / name).write_bytes(data)
    return name


def build_sdist(sdist_directory, config_settings=None) -> str:
    name, data = sdist_bytes()
    (Path(sdist_directory) / name).write_bytes(data)
    return name
