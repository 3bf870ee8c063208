"""The demo packages shipped in the repository, read from disk as package file dicts."""
from pathlib import Path

from . import package

DEMO_DIR = Path(__file__).resolve().parent / "demo_packages"


def read_folder(path: Path) -> dict[str, str]:
    """Read a package folder into {relative path: text}, with the archive reader's rules."""
    files = {}
    for p in sorted(path.rglob("*")):
        if not p.is_file() or "__pycache__" in p.parts or p.name == ".DS_Store":
            continue
        rel = p.relative_to(path).as_posix()
        data = p.read_bytes()
        if package.is_binary_asset(rel):
            import base64

            files[rel] = "base64:" + base64.b64encode(data).decode()
            continue
        try:
            files[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise package.InvalidPackage(rel, None, "is not UTF-8 text") from None
    return files


def demo_package_dirs() -> list[Path]:
    return sorted(p for p in DEMO_DIR.iterdir() if (p / "environment.toml").exists())
