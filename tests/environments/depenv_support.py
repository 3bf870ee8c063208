"""Test support for dependency environments: tiny local wheels (no internet needed for them) and a
DEPENV_ROOT of the test session's own, shared by the tests that build the same sets."""

import base64
import hashlib
import textwrap
import zipfile
from pathlib import Path

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


def make_plugin_wheels(folder: Path) -> Path:
    make_wheel(folder, "studio-counter-plugin", "1.0.0", {
        "studio_counter_plugin/__init__.py": PLUGIN_MODULE,
        "studio_counter_plugin/env.py": PLUGIN_ENV,
        "studio_broken_plugin/__init__.py": BROKEN_MODULE,
    })
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
