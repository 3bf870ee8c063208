"""docker-compose.yml: `docker compose config` accepts it, and every studio process (web, worker,
episode host) is there, configured alike, with object storage for artifacts shared between hosts."""
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STUDIO_PROCESSES = ("web", "worker", "episode-host")


def compose_command() -> list[str]:
    """`docker compose` (the v2 plugin) or `docker-compose` (Debian's package), whichever is installed."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither `docker compose` nor `docker-compose` is installed (scripts/system_packages.sh installs it)")


def test_docker_compose_config_accepts_the_file_and_runs_every_studio_process():
    result = subprocess.run([*compose_command(), "-f", str(REPO / "docker-compose.yml"), "config"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"db", "redis", "objects", *STUDIO_PROCESSES} <= set(services)
    assert "episode_host" in str(services["episode-host"]["command"])
    assert "worker" in str(services["worker"]["command"]) and "uvicorn" in str(services["web"]["command"])
    # One configuration for every studio process: the same database, Redis and artifact store.
    shared = ("DATABASE_URL", "REDIS_URL", "ARTIFACT_STORAGE", "S3_BUCKET", "S3_ENDPOINT_URL", "SECRET_KEY")
    configs = {name: {key: services[name]["environment"].get(key) for key in shared} for name in STUDIO_PROCESSES}
    assert len({tuple(config.values()) for config in configs.values()}) == 1, configs
    assert configs["web"]["ARTIFACT_STORAGE"] == "s3" and configs["web"]["S3_ENDPOINT_URL"].startswith("http://objects:")
