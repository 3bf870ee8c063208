"""The image the `docker` sandbox backend runs: built locally from this host's files, no registry.

No image registry is reachable from these machines, so the image is a `docker import` of a small root
file system assembled here: Debian's /usr/bin/python3 and its standard library, the shared libraries
they need (found with ldd), numpy and Gymnasium (with their dependencies) from this interpreter's
site-packages, and a minimal /etc. The runner (runner.py, protocol.py) and the SDK are NOT in the
image: the backend mounts them read-only at run time, so editing them never needs a rebuild.

The tag is a hash of what goes in (paths, sizes, modification times), so the image is built once per
content and reused: `ensure_image()` is a no-op (one `docker image inspect`) when it exists.
"""

import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

IMAGE_REPOSITORY = "studio-sandbox"
BUILDER_VERSION = "2"  # bump when the layout below changes

PYTHON_IN_IMAGE = "/usr/bin/python3"
SITE_PACKAGES_IN_IMAGE = "/opt/studio/site-packages"
RUNNER_DIR_IN_IMAGE = "/opt/studio/runner"
SDK_IN_IMAGE = "/opt/studio/sdk"
WORKDIR_IN_IMAGE = "/work"

HOST_PYTHON = "/usr/bin/python3"
# Third-party packages sandboxed code may import (Gymnasium environments), copied from site-packages.
DEFAULT_PACKAGES = ("numpy", "gymnasium", "cloudpickle", "farama_notifications", "typing_extensions")
# Standard-library parts nothing in a sandbox needs (saves ~25 MB and seconds of import).
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "config-3.11-x86_64-linux-gnu"}
PACKAGE_SKIP = {"tests"}
# libgcc_s is dlopen()ed by glibc when a thread exits (ldd does not list it); the rest of the C library
# is there for a version's dependency environment, whose extension modules (pygame, mujoco) load
# parts of glibc that the interpreter and numpy do not.
EXTRA_LIBS = ("libgcc_s.so.1", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1", "libm.so.6",
              "libresolv.so.2", "libstdc++.so.6")

ETC_PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
ETC_GROUP = "root:x:0:\nnogroup:x:65534:\n"


class ImageBuildError(Exception):
    pass


def docker_engine_status(docker: str = "docker", timeout: float = 20.0) -> tuple[bool, str]:
    """(True, server version) when an engine answers, else (False, why not)."""
    try:
        result = subprocess.run(
            [docker, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError:
        return False, f"no {docker!r} command (run scripts/start_docker.sh)"
    except subprocess.TimeoutExpired:
        return False, f"`{docker} version` did not answer within {timeout:g} s"
    if result.returncode != 0 or not result.stdout.strip():
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        return False, (lines[-1] if lines else f"`{docker} version` exited with {result.returncode}")
    return True, result.stdout.strip()


# -- what goes in ---------------------------------------------------------------------------------


def _host_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _stdlib_dir(python: str) -> Path:
    out = subprocess.run(
        [python, "-S", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _walk(root: Path, skip: set[str], top_skip: set[str] = frozenset()):
    """Files under root (symlinks followed), skipping directories named in skip (top_skip: top level only)."""
    for folder, dirs, files in os.walk(root, followlinks=True):
        relative = os.path.relpath(folder, root)
        dirs[:] = sorted(
            name for name in dirs if name not in skip and not (relative == "." and name in top_skip)
        )
        for name in sorted(files):
            yield Path(folder) / name


def _package_paths(site_packages: Path, packages) -> list[Path]:
    """Each package's module or folder, its `<name>.libs` (auditwheel) folder and its dist-info."""
    found = []
    entries = sorted(os.listdir(site_packages))
    for name in packages:
        matched = False
        for entry in entries:
            if entry in (name, f"{name}.py", f"{name}.libs") or (
                entry.endswith(".dist-info") and entry.lower().startswith(name.lower().replace("-", "_") + "-")
            ):
                found.append(site_packages / entry)
                matched = True
        if not matched:
            raise ImageBuildError(f"package {name!r} is not in {site_packages}")
    return found


def primary_contents(
    python: str = HOST_PYTHON, site_packages: Path | None = None, packages=DEFAULT_PACKAGES
) -> list[tuple[Path, str]]:
    """(host file, path in image) for the interpreter, its stdlib and the packages (libraries come later)."""
    site_packages = site_packages or _host_site_packages()
    python_real = Path(os.path.realpath(python))
    contents = [(python_real, PYTHON_IN_IMAGE), (Path(os.path.realpath("/usr/bin/env")), "/usr/bin/env")]
    stdlib = _stdlib_dir(python)
    for path in _walk(stdlib, {"test", "tests"}, STDLIB_SKIP):
        contents.append((path, str(stdlib / path.relative_to(stdlib))))
    for top in _package_paths(site_packages, packages):
        if top.is_dir():
            for path in _walk(top, PACKAGE_SKIP):
                contents.append((path, f"{SITE_PACKAGES_IN_IMAGE}/{path.relative_to(site_packages)}"))
        else:
            contents.append((top, f"{SITE_PACKAGES_IN_IMAGE}/{top.name}"))
    return contents


def content_tag(contents: list[tuple[Path, str]]) -> str:
    digest = hashlib.sha256(f"builder {BUILDER_VERSION}\n".encode())
    for host, inside in contents:
        info = host.stat()
        digest.update(f"{inside}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_mode & 0o777}\n".encode())
    return digest.hexdigest()[:16]


def image_name(python: str = HOST_PYTHON, site_packages: Path | None = None, packages=DEFAULT_PACKAGES) -> str:
    return f"{IMAGE_REPOSITORY}:{content_tag(primary_contents(python, site_packages, packages))}"


_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def _shared_libraries(files: list[Path]) -> set[str]:
    """Every library the ELF files in `files` load (ldd resolves rpaths, so bundled ones too)."""
    elf = []
    for path in files:
        try:
            with open(path, "rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    elf.append(str(path))
        except OSError:
            continue
    libraries: set[str] = set()
    for start in range(0, len(elf), 64):
        result = subprocess.run(["ldd", *elf[start : start + 64]], capture_output=True, text=True)
        for line in result.stdout.splitlines():
            match = _LDD_LINE.search(line)
            if match:
                libraries.add(match.group(1))
    for name in EXTRA_LIBS:
        for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64"):
            if os.path.exists(os.path.join(folder, name)):
                libraries.add(os.path.join(folder, name))
                break
    return libraries


def _image_path_of_library(path: str) -> str:
    """The library at its path with the folder resolved (/lib64/x -> /usr/lib64/x on merged-/usr hosts)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def full_contents(primary: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    contents = list(primary)
    have = {inside for _host, inside in contents}
    for library in sorted(_shared_libraries([host for host, _inside in primary])):
        inside = _image_path_of_library(library)
        if inside.startswith(SITE_PACKAGES_IN_IMAGE) or inside in have:
            continue
        host_real = os.path.realpath(library)
        # A library bundled inside a package (numpy.libs) is already in the image at its package path.
        if any(host_real == str(host) for host, _ in primary):
            continue
        contents.append((Path(host_real), inside))
        have.add(inside)
    return contents


# -- building -------------------------------------------------------------------------------------


def _write_tar(stream, contents: list[tuple[Path, str]]) -> None:
    with tarfile.open(fileobj=stream, mode="w|", dereference=True, format=tarfile.GNU_FORMAT) as tar:
        directories = set()

        def add_dir(path: str, mode: int = 0o755):
            if path in directories or path in ("", "/"):
                return
            add_dir(os.path.dirname(path))
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(info)
            directories.add(path)

        def add_bytes(path: str, data: bytes, mode: int = 0o644):
            add_dir(os.path.dirname(path))
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))

        # Mirror the host's merged-/usr links (bin -> usr/bin, lib -> usr/lib, lib64 -> usr/lib64).
        for name in ("bin", "sbin", "lib", "lib64"):
            host = f"/{name}"
            if os.path.islink(host):
                info = tarfile.TarInfo(name)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(host), 0o777
                tar.addfile(info)
                directories.add(host)
        for folder in ("/tmp", WORKDIR_IN_IMAGE, RUNNER_DIR_IN_IMAGE, SDK_IN_IMAGE, "/proc", "/dev", "/sys", "/etc"):
            add_dir(folder, 0o1777 if folder == "/tmp" else 0o755)
        add_bytes("/etc/passwd", ETC_PASSWD.encode())
        add_bytes("/etc/group", ETC_GROUP.encode())
        add_bytes("/etc/hostname", b"sandbox\n")
        for host, inside in sorted(contents, key=lambda item: item[1]):
            add_dir(os.path.dirname(inside))
            info = tar.gettarinfo(str(host), inside.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode &= 0o755
            with open(host, "rb") as handle:
                tar.addfile(info, handle)


def image_exists(name: str, docker: str = "docker") -> bool:
    result = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True)
    return result.returncode == 0


def build_image(name: str, contents: list[tuple[Path, str]], docker: str = "docker", timeout: float = 300.0) -> None:
    """`docker import` a tar stream of `contents` as `name` (written straight into the engine)."""
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [docker, "import", "--message", "studio sandbox runtime (built locally)", "-", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        try:
            _write_tar(proc.stdin, contents)
            proc.stdin.close()
            proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.returncode != 0:
            errors.seek(0)
            why = errors.read().decode("utf-8", "replace").strip()[-500:]
            raise ImageBuildError(f"docker import failed: {why}")


def ensure_image(
    docker: str = "docker",
    python: str = HOST_PYTHON,
    site_packages: Path | None = None,
    packages=DEFAULT_PACKAGES,
) -> str:
    """The runtime image's name, built first when this content has no image yet."""
    primary = primary_contents(python, site_packages, packages)
    name = f"{IMAGE_REPOSITORY}:{content_tag(primary)}"
    if not image_exists(name, docker):
        # Images of other contents stay: another studio (or worktree) on this docker host may use them.
        build_image(name, full_contents(primary), docker)
    return name


def main(argv: list[str]) -> int:
    ok, why = docker_engine_status()
    if not ok:
        print(f"no Docker engine: {why}", file=sys.stderr)
        return 1
    started = time.monotonic()
    name = ensure_image()
    print(f"{name} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
