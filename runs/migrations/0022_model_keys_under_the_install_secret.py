"""Model API keys stored with the default key (no MODEL_KEY_ENCRYPTION_KEY) were encrypted with a key
derived from SECRET_KEY, public on a development install; re-encrypt them with the one derived from
the install secret (studio/install_secret.py). A key that does not decrypt with the old key (already
re-encrypted, or stored with another key) is left as it is. Going back re-encrypts with the old key."""
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import migrations

from runs.openai_agent import ENCRYPTED_PREFIX, default_model_key
from studio.install_secret import install_secret


def _reencrypt(apps, *, old: Fernet, new: Fernet) -> None:
    AgentSecret = apps.get_model("runs", "AgentSecret")
    for secret in AgentSecret.objects.filter(api_key__startswith=ENCRYPTED_PREFIX).iterator():
        token = secret.api_key[len(ENCRYPTED_PREFIX):].encode("ascii")
        try:
            plain = old.decrypt(token)
        except InvalidToken:
            continue
        secret.api_key = ENCRYPTED_PREFIX + new.encrypt(plain).decode("ascii")
        secret.save(update_fields=["api_key"])


def _keys() -> tuple[Fernet, Fernet] | None:
    if settings.MODEL_KEY_ENCRYPTION_KEY:
        return None  # stored with the configured key, which does not change
    return (Fernet(default_model_key(secret=settings.SECRET_KEY.encode())),
            Fernet(default_model_key(secret=install_secret())))


def forwards(apps, schema_editor):
    keys = _keys()
    if keys:
        _reencrypt(apps, old=keys[0], new=keys[1])


def backwards(apps, schema_editor):
    keys = _keys()
    if keys:
        _reencrypt(apps, old=keys[1], new=keys[0])


class Migration(migrations.Migration):
    dependencies = [("runs", "0021_drop_review_state_begun"), ("studio", "0002_install_secret")]
    operations = [migrations.RunPython(forwards, backwards)]
