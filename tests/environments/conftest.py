"""Environment package and SDK tests: put the SDK where the sandbox puts it, and load package code."""

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK_PATH = REPO / "environments" / "sdk"
DEMO_PACKAGES = REPO / "environments" / "demo_packages"

# pytest-django puts the repository root on sys.path too; this keeps `-p no:django` runs working.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(SDK_PATH) not in sys.path:
    sys.path.insert(0, str(SDK_PATH))

_module_counter = itertools.count()


def _load_module(path: Path):
    """Import a package file (env.py, agent.py) under a fresh name, as the sandbox would."""
    spec = importlib.util.spec_from_file_location(f"_package_code_{next(_module_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_package(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture
def demo_package():
    return lambda name: read_package(DEMO_PACKAGES / name)


@pytest.fixture
def load_module():
    return _load_module


@pytest.fixture
def demo_path():
    return lambda name: DEMO_PACKAGES / name
