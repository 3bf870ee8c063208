"""The worker's claim of a queued rollout as one round trip (runs.services.rollout_claim_queued), and
parked rollouts: those of a team at its cap of running rollouts, sent again as the team's rollouts end.
The two functions, and why they are functions, are in runs/sql/rollout_claim.sql.
"""
from django.db import migrations, models

from studio.sql import rules_load

CLAIM_REVERSE = ("DROP FUNCTION IF EXISTS runs_rollout_claim(bigint, text, integer, integer);"
                 " DROP FUNCTION IF EXISTS runs_team_unpark(bigint, integer, integer);")


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0016_quality_reverifications"),
    ]

    operations = [
        migrations.AddField(
            model_name="rollout",
            name="parked",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="rollout",
            name="stored_bytes",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="rollout",
            index=models.Index(condition=models.Q(("parked", True), ("status", "queued")), fields=["team", "id"], name="rollout_parked"),
        ),
        rules_load("runs/sql/rollout_claim.sql", reverse_sql=CLAIM_REVERSE, check_bodies=False),
    ]
