"""Checking a `gymnasium:` entrypoint where it will run: in a sandbox whose import path is the
version's own (its dependency environment, or the studio's for versions without one), never in the
studio's process, whose Gymnasium registry never imported the plugin."""

from __future__ import annotations

import dataclasses

from .. import package


@dataclasses.dataclass(frozen=True)
class EntrypointCheck:
    ok: bool
    message: str

    def as_dict(self) -> dict:
        return {"ok": self.ok, "message": self.message}


def needs_check(manifest: dict, *, has_dependencies: bool) -> bool:
    """Entrypoints checked in a sandbox: plugin ids ('gymnasium:module:EnvId') and every Gymnasium id
    of a package with dependencies. The others were checked statically by package.validate_package."""
    entrypoint = manifest.get("entrypoint") or ""
    if not entrypoint.startswith(package.GYMNASIUM_PREFIX):
        return False
    module, _env_id = package.gymnasium_entrypoint(entrypoint)
    return module is not None or has_dependencies


# A check runs on the studio's deadline, not the package's own limits (which may allow an hour and 8 GB):
# importing the module and making the environment get 2/3 of CHECK_DEADLINE_S, the reset the rest.
CHECK_DEADLINE_S = 30.0
CHECK_MEMORY_MB = 2048


def check_limits(manifest: dict):
    """The check sandbox's limits: the package's own, within the check's fixed deadline and memory."""
    from runs.sandbox import SandboxLimits  # noqa: PLC0415

    limits = dict(manifest.get("limits") or {})
    within = lambda key, default, cap: min(float(limits.get(key) or default), cap)  # noqa: E731
    return SandboxLimits.from_dict({
        **limits,
        "load_timeout_s": within("load_timeout_s", 30, CHECK_DEADLINE_S * 2 / 3),
        "step_timeout_s": within("step_timeout_s", 10, CHECK_DEADLINE_S / 3),
        "episode_timeout_s": CHECK_DEADLINE_S,
        "memory_mb": int(within("memory_mb", 512, CHECK_MEMORY_MB)),
    })


def check_entrypoint(*, files: dict, manifest: dict, tasks: list, python_path, sandbox_python: str) -> EntrypointCheck:
    """Load the entrypoint in a process sandbox and reset it on the first task with seed 0: the plugin
    module is imported (registering its ids) and Gymnasium makes the environment, as a rollout would."""
    from runs.sandbox import ProcessSandbox, SandboxConfig, SandboxError  # noqa: PLC0415
    from runs.sandbox.errors import UserCodeError  # noqa: PLC0415

    entrypoint = manifest["entrypoint"]
    module, env_id = package.gymnasium_entrypoint(entrypoint)
    sandbox_limits = check_limits(manifest)
    config = SandboxConfig(python=sandbox_python, python_path=tuple(str(path) for path in python_path), preload=())
    task = tasks[0] if tasks else {"id": "check"}
    try:
        with ProcessSandbox(config) as sandbox:
            sandbox.start(files, mode="env", entrypoint=entrypoint, limits=sandbox_limits)
            sandbox.reset(task, 0)
    except UserCodeError as exc:
        where = f"importing {module!r} or making {env_id!r}" if module else f"making {env_id!r}"
        return EntrypointCheck(False, f"entrypoint {entrypoint}: {where} failed: {_short(exc.message)}")
    except SandboxError as exc:
        return EntrypointCheck(False, f"entrypoint {entrypoint}: the check sandbox failed: {_short(str(exc))}")
    return EntrypointCheck(True, f"entrypoint {entrypoint}: Gymnasium made {env_id!r} and reset it")


def _short(text: str, limit: int = 1500) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
