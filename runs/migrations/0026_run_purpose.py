"""Runs by purpose (Run.purpose): existing runs classified once, audit runs are those an audit queued
(AuditRun), runs of the `remote` agent kind sessions (sessions API, OpenEnv, Gym), of the `human` kind
plays, the rest evaluations. Re-verification creates no run, so none is `reverify` yet.

The review state rule (runs/sql/review_state.sql) now never opens an audit's probe and determinism
rollouts, and the open states they already hold close. Reversed, the rule as of 0024 (runs/sql/at_0024/)
is loaded again and those rollouts recounted by it."""

from django.conf import settings
from django.db import migrations, models

from studio.sql import rules_load

CLASSIFY_SQL = """
UPDATE runs_run SET purpose = 'audit' WHERE id IN (SELECT run_id FROM runs_auditrun);
UPDATE runs_run u SET purpose = CASE a.kind WHEN 'remote' THEN 'session' ELSE 'play' END
FROM runs_agent a WHERE a.id = u.agent_id AND a.kind IN ('remote', 'human') AND u.purpose = 'evaluation';
"""

PROBE_ROLLOUTS = """
SELECT r.id FROM runs_rollout r JOIN runs_auditrun a ON a.run_id = r.run_id WHERE a.role IN ('probe', 'determinism')
"""
CLOSE_PROBE_STATES_SQL = f"UPDATE runs_reviewstate SET open = false WHERE open AND rollout_id IN ({PROBE_ROLLOUTS});"
RECOUNT_PROBE_STATES_SQL = f"SELECT runs_review_state_of(s.rollout_id) FROM runs_reviewstate s WHERE s.rollout_id IN ({PROBE_ROLLOUTS});"


class Migration(migrations.Migration):

    dependencies = [
        ('environments', '0004_deps_dependency_environments'),
        ('runs', '0025_audit_warnings'),
        ('studio', '0002_install_secret'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='purpose',
            field=models.CharField(choices=[('evaluation', 'Evaluation'), ('audit', 'Audit'), ('reverify', 'Re-verification'), ('session', 'Session'), ('play', 'Play')], default='evaluation', max_length=16),
        ),
        migrations.AddField(
            model_name='run',
            name='session_key',
            field=models.CharField(blank=True, default='', max_length=300),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['team', 'purpose', '-created_at', '-id'], name='run_team_purpose'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['agent', '-created_at', '-id'], name='run_agent_created'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['environment_version', '-created_at', '-id'], name='run_version_created'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('purpose', 'session')), fields=['team', 'environment_version', 'agent', 'session_key', '-created_at'], name='run_session_group'),
        ),
        migrations.RunSQL(CLASSIFY_SQL, migrations.RunSQL.noop),
        # Reversed, the rule as of 0024 first, then the probe rollouts recounted by it (reopened).
        migrations.RunSQL(CLOSE_PROBE_STATES_SQL, RECOUNT_PROBE_STATES_SQL),
        rules_load("runs/sql/at_0026/review_state.sql", reverse_sql=rules_load("runs/sql/at_0024/review_state.sql").sql),
    ]
