"""Task statistics that forget (runs.curriculum.stats.RECENT_DECAY): two decayed counts per row, filled
once from the all-time counts as if their rollouts had come evenly (n rollouts decayed at 1 - 1/32 sum
to 32 * (1 - (1 - 1/32)^n)); from then on each finishing rollout updates them exactly."""
from django.db import migrations, models

FILL = """
    UPDATE runs_taskstat SET
        recent_rollouts = 32 * (1 - power(1 - 1 / 32.0, rollouts)),
        recent_successes = CASE WHEN rollouts > 0 THEN successes::float / rollouts * 32 * (1 - power(1 - 1 / 32.0, rollouts))
                           ELSE 0 END
"""


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0027_task_stats'),
    ]

    operations = [
        migrations.AddField(
            model_name='taskstat',
            name='recent_rollouts',
            field=models.FloatField(default=0.0),
        ),
        migrations.AddField(
            model_name='taskstat',
            name='recent_successes',
            field=models.FloatField(default=0.0),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
    ]
