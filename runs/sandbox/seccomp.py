"""The system-call filter of process-backend sandboxes (bubblewrap's `--seccomp FD`).

Namespaces, a read-only view, rlimits and a cgroup bound what sandboxed code can reach; this filter
takes away the calls an environment never needs and an escape usually does: tracing other processes,
mounting, the kernel keyring, eBPF, new namespaces, perf events, kernel modules and the like. They
fail with EPERM (as under Docker's default profile); `clone3` fails with ENOSYS, so the C library
falls back to `clone`, whose namespace flags the filter can see and refuses. Everything else is
allowed. The program is compiled once per process by libseccomp (pyseccomp) and handed to bwrap,
which loads it last, just before it executes the runner (bwrap's own set-up is not filtered).
"""
import errno
import functools
import io
import os

# What sandboxed code may not call (each EPERM).
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "chroot",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "unshare", "setns",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie",
)
# clone flags that make a namespace (sched.h)
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}


class SeccompUnavailable(Exception):
    """libseccomp or its Python binding is missing: the sandbox runs without the filter (and says so)."""


@functools.cache
def filter_program() -> bytes:
    """The compiled BPF program (raises SeccompUnavailable without libseccomp)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as exc:  # the binding, or libseccomp.so.2 it loads
        raise SeccompUnavailable(f"no libseccomp: {exc}") from None
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):
            continue  # a call this kernel's architecture does not have
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in CLONE_NAMESPACE_FLAGS.values():
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    buffer = io.BytesIO()
    # export_bpf wants a real file: a memfd, read back.
    fd = os.memfd_create("seccomp-export", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as file:
        rules.export_bpf(file)
        file.seek(0)
        buffer.write(file.read())
    return buffer.getvalue()


def filter_fd() -> int:
    """A file descriptor (not inherited unless passed) from which bwrap reads the program; the caller
    closes it once the sandbox has started."""
    program = filter_program()
    fd = os.memfd_create("sandbox-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
