"""The program inside a sandbox: loads an environment or a scripted agent and answers protocol requests.

Run as a script by Debian's /usr/bin/python3 under a sandbox uid (see process.py); standard library,
the SDK and protocol.py only. It owns the protocol pipe before any user code runs.
"""

import os
import sys

# Take private copies of the protocol pipe, then point fd 0 at /dev/null and fd 1 at stderr, so that
# user code that prints, writes to fd 1 or reads stdin cannot corrupt or steal protocol messages.
# os.dup() returns non-inheritable descriptors, so subprocesses of user code do not get them either.
_PROTOCOL_IN = os.dup(0)
_PROTOCOL_OUT = os.dup(1)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.dup2(2, 1)
sys.stdout = sys.stderr

import importlib  # noqa: E402
import resource  # noqa: E402
import traceback  # noqa: E402

import protocol  # noqa: E402  (beside this file; the runner's directory is sys.path[0])

# bubblewrap's --chdir sets PWD; the sandbox's environment is exactly what the host passed.
os.environ.pop("PWD", None)

# The runner's own directory must not shadow or expose anything to user code.
del sys.path[0]


# A reset/step side result (a browser env's screenshot) larger than this is dropped.
MAX_ARTIFACT_BYTES = 1024 * 1024


class ContractError(Exception):
    """User code returned something the environment contract does not allow."""


class LimitExceeded(Exception):
    """User code returned something over a size limit of its version."""


DEFAULT_OBSERVATION_MB = 8  # environments/package.py's default; the worker sends the version's own


def _fallback_jsonable(value, keep_arrays=False):
    """Used only when the SDK is not importable: plain JSON types, numpy through tolist()/item(), the
    floats JSON cannot carry as protocol envelopes, arrays kept as arrays for the observation."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return protocol.float_envelope(value) or value
    if isinstance(value, dict):
        return {str(k): _fallback_jsonable(v, keep_arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_fallback_jsonable(v, keep_arrays) for v in value]
    if keep_arrays and protocol.is_wire_array(value) and getattr(value, "ndim", 0):
        return value
    if hasattr(value, "tolist"):
        return _fallback_jsonable(value.tolist())
    if hasattr(value, "item"):
        return _fallback_jsonable(value.item())
    return str(value)


def _load_jsonable():
    """(jsonable, encodable) from the SDK, or the fallback's pair."""
    try:
        from studio_sdk import encodable, jsonable
    except ImportError:
        return _fallback_jsonable, lambda value: _fallback_jsonable(value, True)
    return jsonable, encodable


def _version_of(module_name):
    module = sys.modules.get(module_name)
    if module is not None and hasattr(module, "__version__"):
        return module.__version__
    # The dist-info folder name carries the version; importlib.metadata would cost ~20 ms of imports.
    prefix = module_name + "-"
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    return None


def apply_limits(limits):
    """Lower this process's rlimits (a process may always lower its own)."""
    applied = {}

    def lower(resource_id, value):
        soft, hard = resource.getrlimit(resource_id)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(resource_id, (value, value))
        return value

    if limits.get("memory_mb"):
        # Chromium reserves far more address space than it uses: a browser sandbox caps each
        # process's data segment instead of its address space.
        memory_limit = resource.RLIMIT_DATA if limits.get("browser") else resource.RLIMIT_AS
        applied["memory_mb"] = lower(memory_limit, int(limits["memory_mb"]) * 1024 * 1024) // (1024 * 1024)
        if limits.get("browser"):
            applied["browser"] = True
    if limits.get("cpu_s"):
        # RLIMIT_CPU counts the whole life of the process, warm-up included: grant cpu_s from now.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        target = used + int(limits["cpu_s"])
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard - 1)
        # Soft limit sends SIGXCPU; the hard limit, one second later, SIGKILL.
        resource.setrlimit(resource.RLIMIT_CPU, (target, target + 1 if hard == resource.RLIM_INFINITY else hard))
        applied["cpu_s"] = int(limits["cpu_s"])
    if limits.get("fsize_mb"):
        applied["fsize_mb"] = lower(resource.RLIMIT_FSIZE, int(limits["fsize_mb"]) * 1024 * 1024) // (1024 * 1024)
    if limits.get("nofile"):
        applied["nofile"] = lower(resource.RLIMIT_NOFILE, int(limits["nofile"]))
    if limits.get("nproc"):
        applied["nproc"] = lower(resource.RLIMIT_NPROC, int(limits["nproc"]))
    return applied


class Runner:
    def __init__(self):
        self.mode = None
        self.target = None  # the environment instance made at load, or the agent module
        self.make_environment = None  # env mode: makes one more instance of the entrypoint class
        self.episodes = {}  # episode id -> its own environment instance (shared sandboxes)
        self.workdir = os.getcwd()
        self.limits = {}
        self.observation_bytes = int(DEFAULT_OBSERVATION_MB * 1e6)
        self.jsonable = _fallback_jsonable
        self.encodable = lambda value: _fallback_jsonable(value, True)

    # -- user-code errors -------------------------------------------------------------------------

    def describe_exception(self, exc):
        """'ValueError: bad action (env.py line 12)': the innermost frame in the sandbox's own files."""
        where = ""
        prefix = self.workdir.rstrip(os.sep) + os.sep
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename.startswith(prefix):
                where = f" ({frame.filename[len(prefix):]} line {frame.lineno})"
                break
        text = str(exc)
        if isinstance(exc, MemoryError):
            limit = self.limits.get("memory_mb")
            text = f"out of memory (memory_mb={limit})" if limit else (text or "out of memory")
        head = type(exc).__name__ + (f": {text}" if text else "")
        if len(head) > 2000:
            head = head[:2000] + "..."
        return head + where

    def json(self, value, what):
        try:
            return self.jsonable(value)
        except (TypeError, ValueError) as exc:
            raise ContractError(f"{what} is not JSON: {exc}") from None

    def observation(self, value, what):
        """The observation as it crosses (arrays kept for binary frames), and the reason it may not:
        over the version's `[limits] observation_mb` (None when it fits)."""
        try:
            value = self.encodable(value)
            size = protocol.encoded_size(value)
        except (TypeError, ValueError) as exc:
            raise ContractError(f"{what} is not JSON: {exc}") from None
        reason = protocol.over_limit(size, self.observation_bytes, what)
        if reason:
            return None, f"{reason} ([limits] observation_mb = {self.observation_bytes / 1e6:g})"
        return value, None

    def info(self, value, what):
        """Info as it crosses: JSON, with numeric arrays kept (binary frames), so the agent and the
        client get them back with their dtype."""
        try:
            info = self.encodable(value) if value is not None else {}
        except (TypeError, ValueError) as exc:
            raise ContractError(f"{what} is not JSON: {exc}") from None
        size = protocol.encoded_size(info)
        reason = protocol.over_limit(size, protocol.MAX_INFO_BYTES, what)
        if reason:
            raise LimitExceeded(reason)
        return info

    # -- ops ----------------------------------------------------------------------------------------

    def op_load(self, message):
        if self.mode is not None:
            raise ProtocolViolation("load was already done")
        mode = message.get("mode")
        if mode not in protocol.MODES:
            raise ProtocolViolation(f"unknown mode {mode!r}")
        entrypoint = message.get("entrypoint") or ""
        if message.get("workdir"):
            os.chdir(message["workdir"])
            self.workdir = os.getcwd()
        os.environ["HOME"] = self.workdir
        os.environ["TMPDIR"] = self.workdir
        sys.path.insert(0, self.workdir)
        requested = message.get("limits") or {}
        self.limits = apply_limits(requested)
        if isinstance(requested.get("observation_mb"), (int, float)) and requested["observation_mb"] > 0:
            self.observation_bytes = int(requested["observation_mb"] * 1e6)
        self.jsonable, self.encodable = _load_jsonable()
        if mode == "env" and message.get("seed_secret"):
            try:
                from studio_sdk import set_seed_secret
            except ImportError:
                pass  # an environment without the SDK has no seed_rng to mix it into
            else:
                set_seed_secret(message["seed_secret"])
        if mode == "env":
            self.make_environment = self._load_environment(entrypoint)
            self.target = self.make_environment()
        else:
            self.target = self._load_agent(entrypoint)
        self.mode = mode
        tools = getattr(self.target, "tools", None) if mode == "env" else None
        return {
            "python": sys.version.split()[0],
            "numpy": _version_of("numpy"),
            "gymnasium": _version_of("gymnasium"),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "pid": os.getpid(),
            "netns": _netns(),
            "limits": self.limits,
            "tools": self.json(tools, "tools") if tools is not None else None,
        }

    def _load_environment(self, entrypoint):
        """What makes an instance of the environment: its class, or a Gymnasium wrapper maker."""
        if entrypoint.startswith("gymnasium:"):
            from studio_sdk import GymnasiumEnvironment

            env_id = entrypoint.split(":", 1)[1]
            return lambda: GymnasiumEnvironment(env_id)
        module_name, _, class_name = entrypoint.partition(":")
        if not module_name or not class_name:
            raise ContractError(f"entrypoint {entrypoint!r} is not 'module:Class' or 'gymnasium:<id>'")
        module = importlib.import_module(module_name)
        try:
            cls = getattr(module, class_name)
        except AttributeError:
            raise ContractError(f"{module_name}.py has no {class_name}") from None
        return cls

    def _load_agent(self, entrypoint):
        module_name = entrypoint.partition(":")[0]
        if module_name.endswith(".py"):
            module_name = module_name[:-3]
        module = importlib.import_module(module_name or "agent")
        if not callable(getattr(module, "act", None)):
            raise ContractError(f"{module_name}.py has no act(observation, info) function")
        return module

    def _environment(self, message, op):
        """The instance a request is for: its episode's (made on the episode's first reset), or the
        one made at load when the request names no episode."""
        episode = message.get("episode")
        if episode is None:
            return self.target
        self._require("env", f"{op} of an episode")
        if not isinstance(episode, str) or not episode or len(episode) > protocol.MAX_EPISODE_ID_CHARS:
            raise ProtocolViolation(f"episode must be a string of 1 to {protocol.MAX_EPISODE_ID_CHARS} characters")
        instance = self.episodes.get(episode)
        if instance is None:
            if op != "reset":
                raise ProtocolViolation(f"{op} for episode {episode!r}, which has not been reset")
            instance = self.make_environment()
            self.episodes[episode] = instance
        return instance

    def op_reset(self, message):
        task, seed = message.get("task") or {}, message.get("seed")
        if self.mode == "agent" and message.get("episode") is None:
            if callable(getattr(self.target, "reset", None)):
                self.target.reset(task, seed)
            return None
        env = self._environment(message, "reset")
        observation = env.reset(task, seed)
        try:
            action_space = self.json(getattr(env, "action_space", None), "action_space")
        except Exception:
            action_space = None
        observation, too_large = self.observation(observation, "reset() observation")
        if too_large:
            raise LimitExceeded(too_large)
        try:
            action_schema = self.json(getattr(env, "action_schema", None), "action_schema")
        except Exception:
            action_schema = None
        try:
            observation_space = self.json(getattr(env, "observation_space", None), "observation_space")
        except Exception:
            observation_space = None
        result = {
            "observation": observation,
            "action_space": action_space,
            "observation_space": observation_space if isinstance(observation_space, dict) else None,
            "action_schema": action_schema if isinstance(action_schema, dict) else None,
            "info": self.info(getattr(env, "reset_info", None), "reset info"),
        }
        return self._with_state(env, self._with_artifact(env, result))

    def op_step(self, message):
        self._require("env", "step")
        env = self._environment(message, "step")
        result = env.step(message.get("action"))
        if not isinstance(result, (tuple, list)) or len(result) != 5:
            got = f"{len(result)} values" if isinstance(result, (tuple, list)) else type(result).__name__
            raise ContractError(
                f"step() must return (observation, reward, terminated, truncated, info), got {got}"
            )
        observation, reward, terminated, truncated, info = result
        try:
            reward = float(reward)
        except (TypeError, ValueError):
            raise ContractError(f"step() reward must be a number, got {type(reward).__name__}") from None
        observation, too_large = self.observation(observation, "step() observation")
        result = {
            "observation": observation,
            "reward": reward if reward == reward and abs(reward) != float("inf") else None,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": self.info(info, "step() info"),
        }
        if too_large:
            # The rest of the step is real: the worker records it with the reason and ends the episode.
            result["observation_error"] = too_large
        return self._with_state(env, self._with_artifact(env, result))

    def _with_state(self, env, result):
        """Add the env's own state (`state()`: a JSON object the protocols serve at /state) when it has one."""
        state = getattr(env, "state", None)
        if not callable(state):
            return result
        # Only the protocols' /state reads it: a failing or odd state() never costs the step.
        try:
            value = self.info(state(), "state()")
        except Exception as exc:  # noqa: BLE001 - reported beside the step, which stands
            result["state_error"] = f"state() failed: {type(exc).__name__}: {exc}"[:500]
            return result
        if isinstance(value, dict):
            result["state"] = value
        else:
            result["state_error"] = f"state() must return a JSON object, not {type(value).__name__}"
        return result

    def _with_artifact(self, env, result):
        """Add the env's side result of this call (`take_artifact()`: a screenshot) when it has one."""
        take = getattr(env, "take_artifact", None)
        if not callable(take):
            return result
        artifact = take()
        if (
            isinstance(artifact, dict)
            and isinstance(artifact.get("base64"), str)
            and len(artifact["base64"]) <= MAX_ARTIFACT_BYTES
        ):
            result["artifact"] = {"type": str(artifact.get("type") or "image/jpeg"), "base64": artifact["base64"]}
        return result

    def op_verify(self, message):
        self._require("env", "verify")
        verify = getattr(self._environment(message, "verify"), "verify", None)
        if not callable(verify):
            return {"reward": None, "reason": "the environment has no verify()"}
        result = verify()
        if result is None:
            return {"reward": None, "reason": "the environment has no verifier"}
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ContractError("verify() must return (reward, reason)")
        reward, reason = result
        try:
            reward = float(reward)
        except (TypeError, ValueError):
            raise ContractError(f"verify() reward must be a number, got {type(reward).__name__}") from None
        return {"reward": reward, "reason": str(reason)}

    def op_act(self, message):
        self._require("agent", "act")
        observe_space = getattr(self.target, "observe_space", None)
        if isinstance(message.get("space"), dict) and callable(observe_space):
            observe_space(message["space"])  # the built-in random agent samples the env's current space
        action = self.target.act(message.get("observation"), message.get("info") or {})
        return self.json(action, "act() action")

    def op_end(self, message):
        """End one episode of a shared sandbox: close its instance and let it go (ending twice is fine)."""
        self._require("env", "end")
        episode = message.get("episode")
        if not isinstance(episode, str) or not episode:
            raise ProtocolViolation("end needs an episode")
        instance = self.episodes.pop(episode, None)
        close = getattr(instance, "close", None)
        if callable(close):
            close()
        return None

    def op_close(self, message):
        close = getattr(self.target, "close", None) if self.mode == "env" else None
        if callable(close):
            close()
        return None

    def _require(self, mode, op):
        if self.mode != mode:
            raise ProtocolViolation(f"{op} is not allowed in {self.mode or 'unloaded'} mode")


class ProtocolViolation(Exception):
    pass


def _netns():
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def _write(message):
    try:
        data = protocol.encode(message)
    except (TypeError, ValueError) as exc:
        # Not JSON (NaN, a stray object) or over the line limit: say so rather than break the pipe.
        kind = protocol.KIND_LIMIT if isinstance(exc, protocol.ProtocolError) else protocol.KIND_CONTRACT
        data = protocol.encode(protocol.error(f"result could not be sent: {exc}", kind))
    view = memoryview(data)
    while view:
        written = os.write(_PROTOCOL_OUT, view)
        view = view[written:]


def _preload(names):
    """Import modules while the pooled runner waits; "module:function" also calls a warm-up function
    (e.g. studio_sdk.browser:warm starts Chromium ahead of the rollout)."""
    for name in names:
        module_name, _, function = name.partition(":")
        try:
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except Exception:
            pass


def main(argv):
    if len(argv) > 1 and argv[1].startswith("--preload="):
        _preload([name for name in argv[1].split("=", 1)[1].split(",") if name])
    runner = Runner()
    reader = open(_PROTOCOL_IN, "rb", buffering=65536)
    while True:
        try:
            # User code gets real floats back from {"__float__": ...} and numpy arrays from frames.
            message = protocol.read_message(reader, floats=True)
        except protocol.FramingError as exc:
            _write(protocol.error(exc, protocol.KIND_PROTOCOL))
            break
        except protocol.ProtocolError as exc:
            _write(protocol.error(exc, protocol.KIND_PROTOCOL))
            continue
        if message is None:
            break  # the worker went away
        try:
            op = message.get("op")
            handler = getattr(runner, f"op_{op}", None) if op in protocol.OPS else None
            if handler is None:
                raise ProtocolViolation(f"unknown op {op!r}")
            if op != "load" and runner.mode is None:
                raise ProtocolViolation(f"{op} before load")
        except (protocol.ProtocolError, ProtocolViolation) as exc:
            _write(protocol.error(exc, protocol.KIND_PROTOCOL))
            continue
        try:
            response = protocol.ok(handler(message))
        except ProtocolViolation as exc:
            response = protocol.error(exc, protocol.KIND_PROTOCOL)
        except ContractError as exc:
            response = protocol.error(exc, protocol.KIND_CONTRACT)
        except LimitExceeded as exc:
            response = protocol.error(exc, protocol.KIND_LIMIT)
        except BaseException as exc:  # noqa: BLE001 - any failure of user code, SystemExit included
            response = protocol.error(runner.describe_exception(exc), protocol.KIND_EXCEPTION)
        _write(response)
        if op == "close":
            break
    sys.stderr.flush()
    # User code may have left non-daemon threads behind; do not wait for them.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
