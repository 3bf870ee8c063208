"""Unix sockets and files outlive a network namespace: the sandbox must not reach the database's
socket, the services' data, or the media files of other teams (screenshots)."""
import os
import textwrap

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid switch and namespaces need root")

PROBE_ENV = textwrap.dedent(
    """
    import os, socket

    def attempt(fn):
        try:
            return "ok: " + str(fn())
        except Exception as exc:
            return "refused: " + type(exc).__name__

    def connect(path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(path)
        s.close()
        return "connected"

    class Env:
        def reset(self, task, seed):
            return {name: attempt(fn) for name, fn in {
                "pg_socket": lambda: connect("/var/run/postgresql/.s.PGSQL.5432"),
                "pg_socket_run": lambda: connect("/run/postgresql/.s.PGSQL.5432"),
                "pg_data": lambda: os.listdir("/var/lib/postgresql"),
                "media": lambda: open(task["secret_file"]).read(),
                "media_dir": lambda: os.listdir(task["media_root"]),
            }.items()}

        def step(self, action):
            return None, 0.0, True, False, {}
    """
)


@needs_root
def test_sandbox_cannot_reach_the_database_socket_or_media_files(start_sandbox, tmp_path, settings):
    media = os.path.realpath(settings.MEDIA_ROOT)
    os.makedirs(os.path.join(media, "artifacts"), exist_ok=True)
    secret = os.path.join(media, "artifacts", "other-team-screenshot.txt")
    with open(secret, "w") as f:
        f.write("another team's data")
    os.chmod(secret, 0o644)
    try:
        sandbox = start_sandbox({"env.py": PROBE_ENV})
        seen = sandbox.reset({"id": "t1", "secret_file": secret, "media_root": media}, seed=0)
    finally:
        os.unlink(secret)
    for name, outcome in seen.items():
        assert outcome.startswith("refused") or outcome == "ok: []", (name, outcome)
    assert sandbox.facts["isolation"]["filesystem_view"], sandbox.facts
