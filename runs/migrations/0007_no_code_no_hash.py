"""Agents without code (random, model) carried the sha256 of the empty string as a code hash: blank it."""
from django.db import migrations

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def blank_fake_hashes(apps, schema_editor):
    Agent = apps.get_model("runs", "Agent")
    Agent.objects.filter(code="", code_hash=EMPTY_SHA256).update(code_hash="")


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_agent_secret")]
    operations = [migrations.RunPython(blank_fake_hashes, migrations.RunPython.noop)]
