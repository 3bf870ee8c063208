"""Model API keys stored in plain text before keys were encrypted at rest: encrypt them (Fernet, with
settings.MODEL_KEY_ENCRYPTION_KEY). Going back decrypts them again."""
from django.db import migrations

PREFIX = "fernet:"


def encrypt_plain_keys(apps, schema_editor):
    from runs.openai_agent import api_key_encrypt

    AgentSecret = apps.get_model("runs", "AgentSecret")
    for secret in AgentSecret.objects.exclude(api_key="").exclude(api_key__startswith=PREFIX).iterator():
        secret.api_key = api_key_encrypt(secret.api_key)
        secret.save(update_fields=["api_key"])


def decrypt_keys(apps, schema_editor):
    from runs.openai_agent import api_key_decrypt

    AgentSecret = apps.get_model("runs", "AgentSecret")
    for secret in AgentSecret.objects.filter(api_key__startswith=PREFIX).iterator():
        secret.api_key = api_key_decrypt(secret.api_key)
        secret.save(update_fields=["api_key"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0007_no_code_no_hash")]
    operations = [migrations.RunPython(encrypt_plain_keys, decrypt_keys)]
