"""Dependency environment builds: a requirement set built cold (a new root: uv resolves, copies and
byte-compiles; uv's own download cache may be warm) against a cache hit (the set's directory is there),
and, as the peer of the hit, running `uv pip install` again into the built target (uv's own
"already satisfied" check, what a build-every-time design would pay per sandbox).

    .venv/bin/python bench/bench_depenvs.py [--requirement minigrid==3.0.0 ...] [--cold 1] [--warm 200]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_support import percentile  # noqa: E402

from environments.dependencies import builder  # noqa: E402

PYTHON = "/usr/bin/python3"


def remove(root: Path) -> None:
    for folder, _dirs, _files in os.walk(root):
        os.chmod(folder, 0o755)
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requirement", action="append", help="a requirement of the set (repeatable)")
    parser.add_argument("--cold", type=int, default=1, help="cold builds, each in a new root")
    parser.add_argument("--warm", type=int, default=200, help="cache hits")
    args = parser.parse_args()
    requirements = args.requirement or ["minigrid==3.0.0"]
    index = builder.pip_index_config()

    cold, warm, peer = [], [], []
    root = Path(tempfile.mkdtemp(prefix="bench-depenvs-"))
    try:
        for attempt in range(args.cold):
            if attempt:
                remove(root)
                root.mkdir()
            started = time.perf_counter()
            result = builder.build(builder.requirement_set(requirements, python=PYTHON), root=root, python=PYTHON, index=index)
            cold.append(time.perf_counter() - started)
            if not result.ok:
                sys.exit(f"the build failed: {result.error}")
        for _ in range(args.warm):
            started = time.perf_counter()
            # What a sandbox start pays: the set's digest (its requirements normalized) and the lookup.
            result = builder.build(builder.requirement_set(requirements, python=PYTHON), root=root, python=PYTHON, index=index)
            warm.append(time.perf_counter() - started)
            assert result.cached
        target = result.path
        for _ in range(min(5, args.warm)):
            started = time.perf_counter()
            subprocess.run(
                [builder.uv_binary(), "pip", "install", "--no-config", "--target", str(target), "--python", PYTHON,
                 "--only-binary", ":all:", "--index-strategy", "unsafe-best-match", *index.uv_arguments(),
                 *requirements, *builder.base_requirements()],
                capture_output=True, check=False,
            )
            peer.append(time.perf_counter() - started)
    finally:
        remove(root)

    print(f"requirement set: {', '.join(requirements)} + {', '.join(builder.base_requirements())} (Python {PYTHON})")
    print(f"{'measure':<46} {'runs':>5} {'median':>12} {'p95':>12}")
    rows = [
        ("cold build (new root; uv cache as it is)", cold, "s"),
        ("cache hit (digest + lookup)", warm, "ms"),
        ("peer: uv pip install into the built target", peer, "ms"),
    ]
    for name, values, unit in rows:
        scale = 1000.0 if unit == "ms" else 1.0
        print(f"{name:<46} {len(values):>5} {statistics.median(values) * scale:>10.3f}{unit:>2} "
              f"{percentile(values, 0.95) * scale:>10.3f}{unit:>2}")
    print(f"cache hit vs peer: {statistics.median(peer) / statistics.median(warm):.0f}x faster; "
          f"target < 1 s: {'met' if statistics.median(warm) < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
