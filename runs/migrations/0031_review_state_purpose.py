"""The review state keeps its run's purpose (ReviewState.purpose, runs/sql/review_state.sql loaded again),
filled here once from the runs, and a partial index of the open states by (team, purpose, rollout): the
queue's purpose filter (evaluations by default) then reads a page of that index, not every open state of
the team joined to its run. Reversed, the rule as of 0026 (runs/sql/at_0026/) is loaded again."""
from django.db import migrations, models

from studio.sql import rules_load

FILL_SQL = """
UPDATE runs_reviewstate s SET purpose = u.purpose
FROM runs_rollout r JOIN runs_run u ON u.id = r.run_id
WHERE r.id = s.rollout_id AND s.purpose IS DISTINCT FROM u.purpose;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0030_transcript_scan'),
    ]

    operations = [
        # Reversed, the older rule is back before the column goes (its body does not name it).
        migrations.RunSQL(migrations.RunSQL.noop, rules_load("runs/sql/at_0026/review_state.sql").sql),
        migrations.AddField(
            model_name='reviewstate',
            name='purpose',
            field=models.CharField(choices=[('evaluation', 'Evaluation'), ('audit', 'Audit'), ('reverify', 'Re-verification'), ('session', 'Session'), ('play', 'Play')], default='evaluation', max_length=16),
        ),
        migrations.RunSQL(FILL_SQL, migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name='reviewstate',
            index=models.Index(condition=models.Q(('open', True)), fields=['team', 'purpose', 'rollout'], include=('decider_ids',), name='review_state_open_purpose'),
        ),
        rules_load("runs/sql/review_state.sql"),
    ]
