"""What a process sandbox sees: its own root file system view (bubblewrap) and its private,
size-limited scratch space.

The view holds exactly: the interpreter (/usr, read-only, with the merged-/usr links), the import path
of its version (the SDK and a dependency environment or the studio's site-packages, read-only), the
runner's directory (read-only), a few /etc files the dynamic linker and Python read, its own /proc
(own PID namespace) and a minimal /dev, and its workspace: `/sandbox` (the package's files,
read-write) plus /tmp, /var/tmp and /dev/shm, all one tmpfs of `quota_mb` that the host mounts and
unmounts (a 300 MB write fills it and fails; nothing outlives the sandbox). Nothing else of the host:
no checkout, no settings, no logs, no /home, no other sandbox's directory.
"""

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import tempfile
from pathlib import Path

BWRAP = "/usr/bin/bwrap"
WORKDIR_IN_VIEW = "/sandbox"
# The import path and the runner appear under neutral names: the view shows no host layout.
RUNNER_DIR_IN_VIEW = "/opt/studio/runner"
PYTHON_PATH_IN_VIEW = "/opt/studio/python/{index}"
TMP_IN_VIEW = ("/tmp", "/var/tmp", "/dev/shm")
# Top-level links of a merged-/usr system (or real directories on an older one), bound as they are.
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc as far as Python and the dynamic linker need it (no passwd, no hosts, no ssl: no network).
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
# Chromium's wrapper script reads /etc/chromium.d; fontconfig reads /etc/fonts.
BROWSER_ETC = ("/etc/chromium.d", "/etc/chromium", "/etc/fonts")
SCRATCH_DIRS = ("work", "tmp")

MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2
_libc_name = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None


def bwrap_available(path: str = BWRAP) -> bool:
    return os.access(path, os.X_OK)


class Workspace:
    """A sandbox's writable space on the host: `work` (bound at /sandbox) and `tmp` (bound at /tmp,
    /var/tmp and /dev/shm). As root it is a tmpfs of `quota_mb`; elsewhere a plain directory
    (`quota_mb` None: no disk quota)."""

    def __init__(self, path: Path, quota_mb: int | None):
        self.path = path
        self.quota_mb = quota_mb
        self.work = path / "work"
        self.tmp = path / "tmp"

    @classmethod
    def create(cls, root: Path, *, uid: int | None, quota_mb: int) -> "Workspace":
        prefix = f"sb-{uid}-" if uid is not None else "sb-"
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        mounted = None
        try:
            if uid is not None and os.geteuid() == 0 and _LIBC is not None:
                options = f"size={quota_mb}m,nr_inodes=65536,mode=0700,uid={uid},gid={uid}".encode()
                if _LIBC.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0:
                    mounted = quota_mb
            for name in SCRATCH_DIRS:
                (path / name).mkdir(mode=0o700)
                if uid is not None and os.geteuid() == 0:
                    os.chown(path / name, uid, uid)
            if uid is not None and os.geteuid() == 0:
                os.chown(path, uid, uid)
            os.chmod(path, 0o700)
        except BaseException:
            remove_workspace(path)
            raise
        return cls(path, mounted)

    def remove(self) -> None:
        remove_workspace(self.path)


def remove_workspace(path: Path) -> None:
    """Unmount (when it is a tmpfs) and delete a workspace."""
    if _LIBC is not None and os.path.ismount(path):
        _LIBC.umount2(str(path).encode(), MNT_DETACH)
    shutil.rmtree(path, ignore_errors=True)


def remove_stale_workspaces(root: Path, uid: int) -> None:
    """Workspaces of `uid` left by a worker that died (the caller holds the uid's slot, so none is live)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.name.startswith(f"sb-{uid}-"):
                remove_workspace(Path(entry.path))


def view_python_path(python_path: list[str]) -> list[str]:
    """Where each import path entry appears inside the view."""
    return [PYTHON_PATH_IN_VIEW.format(index=index) for index in range(len(python_path))]


def bwrap_argv(
    *,
    python: str,
    python_path: list[str],
    runner_dir: str,
    workspace: Workspace,
    isolate_network: bool = True,
    browser: bool = False,
    bwrap: str = BWRAP,
    seccomp_fd: int | None = None,
) -> list[str]:
    """bwrap's options for this sandbox's view (the command follows them). Import path entries are
    bound at view_python_path(python_path), the runner's directory at RUNNER_DIR_IN_VIEW; `seccomp_fd`
    holds the system-call filter bwrap loads before it executes the command (runs/sandbox/seccomp.py)."""
    argv = [
        bwrap,
        "--unshare-user", "--disable-userns",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--hostname", "sandbox",
    ]
    if isolate_network:
        argv.append("--unshare-net")  # bwrap also brings the new namespace's loopback up
    for link in ROOT_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    read_only = ["/usr"]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if not _inside(prefix, read_only) and prefix != "/":
        read_only.append(prefix)
    read_only += [path for path in ETC_FILES + (BROWSER_ETC if browser else ()) if os.path.exists(path)]
    for path in read_only:
        argv += ["--ro-bind", path, path]
    for path, target in zip(python_path, view_python_path(python_path)):
        argv += ["--ro-bind", path, target]
    argv += ["--ro-bind", runner_dir, RUNNER_DIR_IN_VIEW]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--bind", str(workspace.work), WORKDIR_IN_VIEW]
    for target in TMP_IN_VIEW:
        argv += ["--bind", str(workspace.tmp), target]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--remount-ro", "/", "--chdir", WORKDIR_IN_VIEW, "--"]
    return argv


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
