"""Test support for dependency environments: tiny local wheels (no internet needed for them) and a
DEPENV_ROOT of the test session's own, shared by the tests that build the same sets."""

import base64
import hashlib
import json
import os
import subprocess
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from environments import services as env_services
from environments.dependencies import services as dependency_services

PLUGIN_MODULE = textwrap.dedent('''
    """A Gymnasium plugin: importing it registers StudioCounter-v0."""
    from gymnasium.envs.registration import register

    register(id="StudioCounter-v0", entry_point="studio_counter_plugin.env:CounterEnv", max_episode_steps=30)
''')

PLUGIN_ENV = textwrap.dedent('''
    import gymnasium
    import numpy as np
    from gymnasium import spaces


    class CounterEnv(gymnasium.Env):
        """Reach `target` by adding 0 or 1; the start comes from the seeded np_random."""

        def __init__(self, target=5):
            self.target = target
            self.observation_space = spaces.Box(low=-100, high=100, shape=(2,), dtype=np.float64)
            self.action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.value = float(self.np_random.integers(0, 3))
            return np.array([self.value, self.target], dtype=np.float64), {"start": self.value}

        def step(self, action):
            self.value += float(action) + float(self.np_random.normal(0, 0.01))
            done = self.value >= self.target
            return np.array([self.value, self.target]), (1.0 if done else -0.1), bool(done), False, {}
''')

BROKEN_MODULE = 'raise RuntimeError("the plugin exploded on import")\n'


def make_wheel(folder: Path, name: str, version: str, modules: dict[str, str]) -> Path:
    """A pure-Python wheel of `modules` ({"pkg/__init__.py": source}), with a valid RECORD."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = dict(modules)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Dist: gymnasium\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: studio-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def make_sdist(folder: Path, name: str, version: str) -> Path:
    """A source distribution only (no wheel): the studio installs wheels, never runs a package's build code."""
    import io  # noqa: PLC0415
    import tarfile  # noqa: PLC0415

    stem = f"{name.replace('-', '_')}-{version}"
    sdist = folder / f"{stem}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for path, text in {"PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                           "setup.py": 'raise SystemExit("this build must never run")\n'}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return sdist


def make_plugin_wheels(folder: Path) -> Path:
    make_wheel(folder, "studio-counter-plugin", "1.0.0", {
        "studio_counter_plugin/__init__.py": PLUGIN_MODULE,
        "studio_counter_plugin/env.py": PLUGIN_ENV,
        "studio_broken_plugin/__init__.py": BROKEN_MODULE,
    })
    make_sdist(folder, "studio-sdist-only", "1.0.0")
    return folder


def package_files(*, entrypoint: str, dependencies=None, requirements_txt=None, tasks=None, name="plugin-env") -> dict:
    toml = f'name = "{name}"\nkind = "python"\nentrypoint = "{entrypoint}"\nmax_steps = 40\n'
    if dependencies is not None:
        toml += "dependencies = [" + ", ".join(f'"{item}"' for item in dependencies) + "]\n"
    toml += "\n[limits]\nstep_timeout_s = 10\nepisode_timeout_s = 120\nmemory_mb = 1024\n"
    files = {
        "environment.toml": toml,
        "tasks.jsonl": tasks or '{"id": "t1", "difficulty": 1}\n{"id": "t2", "difficulty": 2, "kwargs": {"target": 3}}\n',
    }
    if requirements_txt is not None:
        files["requirements.txt"] = requirements_txt
    return files


@pytest.fixture(scope="session")
def depenv_root():
    """A cache kept between test runs, as uv keeps its own: sets are content-addressed, so a set built by
    an earlier run is the same set (its first build here takes ~10-40 s, a later run's is a cache hit).
    Under /tmp, traversable by sandbox uids (pytest's own tmp folders are 0700)."""
    root = Path(tempfile.gettempdir()) / "studio-test-depenvs"
    root.mkdir(mode=0o755, exist_ok=True)
    os.chmod(root, 0o755)
    return root


@pytest.fixture(scope="session")
def plugin_wheels(tmp_path_factory):
    return make_plugin_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.fixture
def deps(settings, depenv_root, plugin_wheels, monkeypatch):
    """Settings (and, for worker processes, the environment) pointing at the test's root and wheels."""
    settings.DEPENV_ROOT = depenv_root
    settings.DEPENV_FIND_LINKS = [str(plugin_wheels)]
    monkeypatch.setenv("DEPENV_ROOT", str(depenv_root))
    monkeypatch.setenv("DEPENV_FIND_LINKS", str(plugin_wheels))
    return depenv_root


def commit(team, actor, slug, files):
    env = env_services.environment_create(team=team, actor=actor, name=slug, slug=slug, files=files)
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


def build(version):
    outcome = dependency_services.dependency_environment_build(depenv_id=version.dependency_environment_id)
    version.refresh_from_db()
    version.dependency_environment.refresh_from_db()
    return outcome


def bare_trajectory(site: str, env_id: str, seed: int, actions: list, kwargs=None) -> dict:
    """The same episode stepped by Gymnasium itself, in the dependency environment, outside the studio
    (observations as plain JSON: arrays as lists, numpy scalars as numbers)."""
    script = (
        "import json, sys, gymnasium, numpy as np\n"
        "def plain(x):\n"
        "    if isinstance(x, dict): return {k: plain(v) for k, v in x.items()}\n"
        "    if isinstance(x, (np.ndarray, np.generic)): return x.tolist()\n"
        "    return x\n"
        "env_id, seed, actions, kwargs = json.loads(sys.argv[1])\n"
        "env = gymnasium.make(env_id, **kwargs)\n"
        "obs, info = env.reset(seed=seed)\n"
        "space = env.action_space  # a list action is given in the space's dtype, as the SDK does\n"
        "out = {'reset': plain(obs), 'steps': []}\n"
        "for action in actions:\n"
        "    obs, reward, terminated, truncated, info = env.step(np.asarray(action, dtype=space.dtype).reshape(space.shape) if isinstance(action, list) else action)\n"
        "    out['steps'].append([plain(obs), float(reward), bool(terminated), bool(truncated)])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", script, json.dumps([env_id, seed, actions, kwargs or {}])],
        env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin", "PYGAME_HIDE_SUPPORT_PROMPT": "1"},
        capture_output=True, text=True, timeout=300, check=True,
    )
    return json.loads(proc.stdout)


def stored_plain(value, *, rollout_id: int):
    """A stored observation as plain lists and numbers (its arrays read back from the artifact storage),
    to compare with Gymnasium's own `tolist()`; NaN and -0.0 forms become the floats again."""
    import numpy  # noqa: PLC0415

    from runs.artifacts import arrays_inline  # noqa: PLC0415
    from studio_client import from_json  # noqa: PLC0415

    def plain(item):
        if isinstance(item, dict):
            return {key: plain(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [plain(inner) for inner in item]
        if isinstance(item, (numpy.ndarray, numpy.generic)):
            return item.tolist()
        return item

    return plain(from_json(arrays_inline(value, rollout_id=rollout_id)))
