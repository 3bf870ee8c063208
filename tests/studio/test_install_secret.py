"""A per-install secret: seed secrets and the default model-key encryption key derive from a random
secret kept in the database (or INSTALL_SECRET), never from the public default SECRET_KEY."""
import hashlib
import hmac
import threading

import pytest
from django.db import connection

from runs.openai_agent import api_key_decrypt, api_key_encrypt, default_model_key
from runs.sandbox.secrets import files_digest, version_seed_secret
from studio.install_secret import forget_cached_secret, install_secret

FILES = {"env.py": "class Env: pass\n", "environment.toml": 'name = "guess"\n'}
PUBLIC_DEFAULT = "dev-only-insecure-key-change-me-in-production-0123456789"


@pytest.fixture
def database_secret(settings, db):
    """The install secret as an install without INSTALL_SECRET has it: the database's."""
    settings.INSTALL_SECRET = ""
    forget_cached_secret()
    yield
    forget_cached_secret()


def secret_row() -> list:
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM studio_install_secret")
        return [value for (value,) in cursor.fetchall()]


def test_the_seed_secret_cannot_be_computed_from_the_public_secret_key(database_secret, settings):
    settings.SECRET_KEY = PUBLIC_DEFAULT
    settings.DEBUG = True
    guessed = hmac.new(PUBLIC_DEFAULT.encode(), b"studio-sdk-seed:" + files_digest(FILES), hashlib.sha256).hexdigest()
    actual = version_seed_secret(FILES)
    assert actual and actual != guessed
    assert actual == version_seed_secret(FILES)  # the same files, the same secret


def test_the_secret_is_random_kept_in_the_database_and_read_back(database_secret):
    first = install_secret()
    (stored,) = secret_row()
    assert first == stored.encode() and len(stored) >= 64 and stored != PUBLIC_DEFAULT
    forget_cached_secret()
    assert install_secret() == first


@pytest.mark.django_db(transaction=True)
def test_processes_starting_at_once_agree_on_one_secret(settings):
    settings.INSTALL_SECRET = ""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM studio_install_secret")
    seen, errors = [], []

    def first_start():
        try:
            forget_cached_secret()
            seen.append(install_secret())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    forget_cached_secret()
    assert not errors and len(set(seen)) == 1 and len(secret_row()) == 1


def test_the_secret_outlives_a_flush(db):
    # Django's flush (every transactional test's teardown) empties the tables of managed models only.
    assert "studio_install_secret" in connection.introspection.table_names()
    assert "studio_install_secret" not in connection.introspection.django_table_names(only_existing=True)


def test_install_secret_from_the_environment_wins(settings):
    settings.INSTALL_SECRET = "x" * 40
    assert install_secret() == b"x" * 40
    assert version_seed_secret(FILES) == hmac.new(b"x" * 40, b"studio-sdk-seed:" + files_digest(FILES),
                                                  hashlib.sha256).hexdigest()


def test_model_keys_are_encrypted_with_a_key_from_the_install_secret_not_secret_key(database_secret, settings):
    from cryptography.fernet import Fernet, InvalidToken

    settings.MODEL_KEY_ENCRYPTION_KEY = ""
    settings.SECRET_KEY = PUBLIC_DEFAULT
    stored = api_key_encrypt("sk-123")
    with pytest.raises(InvalidToken):
        Fernet(default_model_key(secret=PUBLIC_DEFAULT.encode())).decrypt(stored.removeprefix("fernet:").encode())
    assert api_key_decrypt(stored) == "sk-123"


def test_the_migration_re_encrypts_keys_stored_under_the_secret_key(database_secret, settings, owner_api):
    from importlib import import_module

    from cryptography.fernet import Fernet
    from django.apps import apps

    from runs.models import Agent, AgentSecret

    settings.MODEL_KEY_ENCRYPTION_KEY = ""
    settings.SECRET_KEY = PUBLIC_DEFAULT
    owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "https://m.example.com/v1", "model": "x"}})
    old = "fernet:" + Fernet(default_model_key(secret=PUBLIC_DEFAULT.encode())).encrypt(b"sk-old").decode()
    AgentSecret.objects.update_or_create(agent=Agent.objects.get(name="m"), defaults={"api_key": old})
    migration = import_module("runs.migrations.0022_model_keys_under_the_install_secret")
    migration.forwards(apps, None)
    moved = AgentSecret.objects.get().api_key
    assert moved != old and api_key_decrypt(moved) == "sk-old"
    migration.forwards(apps, None)  # twice is once
    assert AgentSecret.objects.get().api_key == moved
    migration.backwards(apps, None)
    assert Fernet(default_model_key(secret=PUBLIC_DEFAULT.encode())).decrypt(
        AgentSecret.objects.get().api_key.removeprefix("fernet:").encode()) == b"sk-old"
