"""The install secret's table (unmanaged, so that flush leaves it), and the secret itself: a random
value created here, at the install's first `migrate` (studio/install_secret.py creates it if missing)."""
import secrets

from django.db import migrations, models

CREATE = """
CREATE TABLE IF NOT EXISTS studio_install_secret (
    id smallint PRIMARY KEY CHECK (id = 1),
    value varchar(128) NOT NULL CHECK (length(value) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


def create_secret(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("INSERT INTO studio_install_secret (id, value) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                       [secrets.token_hex(32)])


class Migration(migrations.Migration):
    dependencies = [("studio", "0001_initial")]
    operations = [
        migrations.RunSQL(CREATE, "DROP TABLE IF EXISTS studio_install_secret"),
        migrations.CreateModel(
            name="InstallSecret",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("value", models.CharField(max_length=128)),
                ("created_at", models.DateTimeField()),
            ],
            options={"db_table": "studio_install_secret", "managed": False},
        ),
        migrations.RunPython(create_secret, migrations.RunPython.noop),
    ]
