"""Labels in layers (runs.labels, runs/sql/label_layers.sql): a re-verification's verifier labels are kept
beside the human decisions and never become a rollout's current label over one; a newer verifier that
disagrees with a human marks the rollout (ReviewState.disagreement, AgreementTally.disagreements, and per
verifier version in VerifierTally).

Then the repair of rollouts a re-verification already touched (those with more than one verifier label):
their review state and agreement counts are recounted by the new rules, so the human label is current again
and the run's figures say so; the labels re-verification wrote name their verifier version (read from their
rationale, "re-verified by slug@N: ..."). No label is deleted or changed otherwise. Reversed, the rules as of
0023 (runs/sql/at_0023/) are loaded again and the same rollouts recounted by them."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from studio.sql import rules_load

LAYER_FUNCTIONS = ("runs_verifier_counts_of", "runs_disagreement_of", "runs_label_layers_of", "runs_proposal_of",
                   "runs_current_label_of")

# A re-verification's labels name their verifier (0023 wrote it only into the rationale). This fills the new
# column of those rows once, past the append-only rule, whose trigger is off for this statement alone.
NAME_VERIFIERS_SQL = """
ALTER TABLE runs_rewardlabel DISABLE TRIGGER rewardlabel_append_only;
UPDATE runs_rewardlabel l SET verifier_version_id = v.id
FROM runs_rollout r, environments_environment e, environments_environmentversion v
WHERE l.source = 'verifier' AND l.step_id IS NULL AND l.verifier_version_id IS NULL
    AND l.rationale LIKE 're-verified by %' AND r.id = l.rollout_id AND e.team_id = r.team_id
    AND v.environment_id = e.id
    AND e.slug || '@' || v.number = substring(l.rationale FROM '^re-verified by ([^ :]+@[0-9]+):');
ALTER TABLE runs_rewardlabel ENABLE TRIGGER rewardlabel_append_only;
"""


def recount_sql(*, disagreements: str) -> str:
    """Recount the review state and agreement rows of the rollouts with more than one verifier label, by the
    rules loaded now, and rebuild their runs' totals (AgreementTally, BlindTally) from the rollout rows."""
    return f"""
CREATE TEMPORARY TABLE layered ON COMMIT DROP AS
    SELECT l.rollout_id AS id, r.run_id FROM runs_rewardlabel l JOIN runs_rollout r ON r.id = l.rollout_id
    WHERE l.step_id IS NULL AND l.source = 'verifier' GROUP BY l.rollout_id, r.run_id HAVING count(*) > 1;
SELECT runs_review_state_of(id) FROM layered;
UPDATE runs_agreementtally t SET reviewed = a.reviewed, tt = a.tt, tf = a.tf, ft = a.ft, ff = a.ff, multi = a.multi,
    pairs = a.pairs, agreeing = a.agreeing, disagreements = {disagreements}
FROM layered, LATERAL runs_agreement_of(layered.id) a WHERE t.rollout_id = layered.id;
DELETE FROM runs_agreementtally WHERE rollout_id IS NULL AND run_id IN (SELECT run_id FROM layered);
INSERT INTO runs_agreementtally (run_id, rollout_id, shard, reviewed, approved, rejected, overridden, decisions,
    tt, tf, ft, ff, multi, pairs, agreeing, disagreements, deciders)
SELECT run_id, NULL, shard, sum(reviewed), sum(approved), sum(rejected), sum(overridden), sum(decisions), sum(tt),
    sum(tf), sum(ft), sum(ff), sum(multi), sum(pairs), sum(agreeing), sum(disagreements), '{{}}'
FROM runs_agreementtally WHERE rollout_id IS NOT NULL AND run_id IN (SELECT run_id FROM layered) GROUP BY run_id, shard;
DELETE FROM runs_blindtally WHERE run_id IN (SELECT run_id FROM layered);
INSERT INTO runs_blindtally (run_id, reviewer_id, shard, reviewed, approved, rejected, overridden, decisions,
    tt, tf, ft, ff, multi, pairs, agreeing, disagreements)
SELECT t.run_id, who, t.shard, sum(reviewed), sum(approved), sum(rejected), sum(overridden), sum(decisions), sum(tt),
    sum(tf), sum(ft), sum(ff), sum(multi), sum(pairs), sum(agreeing), sum(disagreements)
FROM runs_agreementtally t JOIN runs_run u ON u.id = t.run_id, unnest(array_prepend(NULL::bigint, t.deciders)) AS who
WHERE t.rollout_id IS NOT NULL AND t.run_id IN (SELECT run_id FROM layered)
    AND cardinality(t.deciders) > 0 AND cardinality(t.deciders) < greatest(u.reviews_required, 1)
GROUP BY t.run_id, who, t.shard;
DROP TABLE layered;
"""


# VerifierTally and VerifierBlindTally are new: every labelled rollout's contribution, then each run's totals and
# what blind review takes out of them (rollouts under way).
VERIFIER_TALLY_SQL = """
INSERT INTO runs_verifiertally (run_id, rollout_id, verifier_version_id, shard, labelled, compared, agreeing, disagreements)
SELECT r.run_id, r.id, c.verifier_version_id, r.id % 8, c.labelled, c.compared, c.agreeing, c.disagreements
FROM runs_rollout r, LATERAL runs_verifier_counts_of(r.id) c
WHERE EXISTS (SELECT 1 FROM runs_rewardlabel l WHERE l.rollout_id = r.id AND l.step_id IS NULL AND l.source = 'verifier');
INSERT INTO runs_verifiertally (run_id, rollout_id, verifier_version_id, shard, labelled, compared, agreeing, disagreements)
SELECT run_id, NULL, verifier_version_id, shard, sum(labelled), sum(compared), sum(agreeing), sum(disagreements)
FROM runs_verifiertally WHERE rollout_id IS NOT NULL GROUP BY run_id, verifier_version_id, shard;
INSERT INTO runs_verifierblindtally (run_id, reviewer_id, verifier_version_id, shard, labelled, compared, agreeing,
    disagreements)
SELECT t.run_id, who, t.verifier_version_id, t.shard, sum(t.labelled), sum(t.compared), sum(t.agreeing),
    sum(t.disagreements)
FROM runs_verifiertally t JOIN runs_agreementtally a ON a.rollout_id = t.rollout_id JOIN runs_run u ON u.id = t.run_id,
    unnest(array_prepend(NULL::bigint, a.deciders)) AS who
WHERE cardinality(a.deciders) > 0 AND cardinality(a.deciders) < greatest(u.reviews_required, 1)
GROUP BY t.run_id, who, t.verifier_version_id, t.shard;
"""


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('environments', '0004_deps_dependency_environments'),
        ('runs', '0023_database_rules_from_sql_files'),
        ('studio', '0002_install_secret'),
    ]

    operations = [
        migrations.CreateModel(
            name='VerifierTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shard', models.PositiveSmallIntegerField()),
                ('labelled', models.IntegerField(default=0)),
                ('compared', models.IntegerField(default=0)),
                ('agreeing', models.IntegerField(default=0)),
                ('disagreements', models.IntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name='agreementtally',
            name='disagreements',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='blindtally',
            name='disagreements',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='reviewstate',
            name='disagreement',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name='rewardlabel',
            name='verifier_version',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.RESTRICT, related_name='+', to='environments.environmentversion'),
        ),
        migrations.AddIndex(
            model_name='reviewstate',
            index=models.Index(condition=models.Q(('disagreement', True)), fields=['team', 'rollout'], name='review_state_disagreement'),
        ),
        migrations.AddField(
            model_name='verifiertally',
            name='rollout',
            field=models.ForeignKey(db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='runs.rollout'),
        ),
        migrations.AddField(
            model_name='verifiertally',
            name='run',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='runs.run'),
        ),
        migrations.AddField(
            model_name='verifiertally',
            name='verifier_version',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='environments.environmentversion'),
        ),
        migrations.AddConstraint(
            model_name='verifiertally',
            constraint=models.UniqueConstraint(condition=models.Q(('rollout__isnull', True)), fields=('run', 'verifier_version', 'shard'), name='verifier_tally_run_total'),
        ),
        migrations.AddConstraint(
            model_name='verifiertally',
            constraint=models.UniqueConstraint(condition=models.Q(('rollout__isnull', False)), fields=('rollout', 'verifier_version'), name='verifier_tally_rollout'),
        ),
        migrations.CreateModel(
            name='VerifierBlindTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shard', models.PositiveSmallIntegerField()),
                ('labelled', models.IntegerField(default=0)),
                ('compared', models.IntegerField(default=0)),
                ('agreeing', models.IntegerField(default=0)),
                ('disagreements', models.IntegerField(default=0)),
                ('reviewer', models.ForeignKey(db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('run', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='runs.run')),
                ('verifier_version', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='environments.environmentversion')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('run', 'reviewer', 'verifier_version', 'shard'), name='verifier_blind_tally_key', nulls_distinct=False)],
            },
        ),
        # Reversed, this runs after the rules as of 0023 are back: the same rollouts recounted by them.
        migrations.RunSQL(migrations.RunSQL.noop, recount_sql(disagreements="0")),
        rules_load(
            "runs/sql/label_layers.sql", "runs/sql/agreement_tally.sql", "runs/sql/blind_tally.sql",
            # The review state rule as 0026 left it: today's reads columns 0026 and 0029 add, and this
            # migration recounts through it.
            "runs/sql/at_0026/review_state.sql",
            reverse_sql="\n".join([
                rules_load("runs/sql/at_0023/agreement_tally.sql", "runs/sql/at_0023/blind_tally.sql",
                           "runs/sql/at_0023/review_state.sql").sql,
                *(f"DROP FUNCTION IF EXISTS {name}(bigint);" for name in LAYER_FUNCTIONS),
            ]),
        ),
        migrations.RunSQL(NAME_VERIFIERS_SQL + recount_sql(disagreements="runs_disagreement_of(layered.id)::int")
                          + VERIFIER_TALLY_SQL, migrations.RunSQL.noop),
    ]
