"""Task statistics per agent (runs.curriculum): the table, filled once from the done rollouts of
evaluations and sessions already stored; from here on each finishing rollout adds itself."""

import django.db.models.deletion
from django.db import migrations, models


BACKFILL_SQL = """
    INSERT INTO runs_taskstat (team_id, environment_version_id, task_id, agent_name, rollouts, successes,
        return_sum, steps_sum, seconds_sum, updated_at)
    SELECT r.team_id, run.environment_version_id, r.task_id, a.name, count(*),
        count(*) FILTER (WHERE r.status = 'succeeded'), sum(r.total_reward), sum(r.step_count),
        COALESCE(sum(EXTRACT(EPOCH FROM (r.finished_at - r.started_at))), 0), now()
    FROM runs_rollout r JOIN runs_run run ON run.id = r.run_id JOIN runs_agent a ON a.id = run.agent_id
    WHERE r.status IN ('succeeded', 'failed') AND run.purpose IN ('evaluation', 'session')
    GROUP BY r.team_id, run.environment_version_id, r.task_id, a.name
"""


class Migration(migrations.Migration):

    dependencies = [
        ('environments', '0004_deps_dependency_environments'),
        ('runs', '0026_run_purpose'),
        ('studio', '0002_install_secret'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskStat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('task_id', models.CharField(max_length=200)),
                ('agent_name', models.CharField(max_length=120)),
                ('rollouts', models.PositiveIntegerField(default=0)),
                ('successes', models.PositiveIntegerField(default=0)),
                ('return_sum', models.FloatField(default=0.0)),
                ('steps_sum', models.BigIntegerField(default=0)),
                ('seconds_sum', models.FloatField(default=0.0)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('environment_version', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='environments.environmentversion')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='studio.team')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('environment_version', 'agent_name', 'task_id'), name='one_task_stat')],
            },
        ),
        migrations.RunSQL(BACKFILL_SQL, migrations.RunSQL.noop),
        migrations.AddField(model_name='run', name='curriculum', field=models.CharField(blank=True, max_length=16)),
    ]
