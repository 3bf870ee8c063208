"""This install's secret: INSTALL_SECRET from the environment, or a random value kept in the database
(studio_install_secret), created once by whichever process asks first. Never derived from SECRET_KEY,
whose development default is public: seed secrets (runs/sandbox/secrets.py) and the default model-key
encryption key (runs/openai_agent.py) derive from this one instead.

Every process of one studio shares the database, so every worker, host and web process gets the same
secret; it is read once per process and database."""
import secrets
import threading

from django.conf import settings
from django.db import connection

_lock = threading.Lock()
_by_database: dict[str, bytes] = {}


def install_secret() -> bytes:
    """The secret's bytes (INSTALL_SECRET's, or the database's, created if it has none)."""
    if settings.INSTALL_SECRET:
        return settings.INSTALL_SECRET.encode("utf-8")
    database = connection.settings_dict["NAME"]
    with _lock:
        if database not in _by_database:
            _by_database[database] = _read_or_create().encode("utf-8")
        return _by_database[database]


def _read_or_create() -> str:
    # ON CONFLICT DO NOTHING: two processes starting at once both insert; the second waits for the
    # first's row and keeps it, and both then read the one that won.
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO studio_install_secret (id, value) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                       [secrets.token_hex(32)])
        cursor.execute("SELECT value FROM studio_install_secret WHERE id = 1")
        return cursor.fetchone()[0]


def forget_cached_secret() -> None:
    """Read the secret from the database again next time (tests that replace it)."""
    with _lock:
        _by_database.clear()
