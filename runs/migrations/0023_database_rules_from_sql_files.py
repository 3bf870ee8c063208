"""Every database rule loaded again from its .sql file, bodies checked against the schema as it is here:
a database at any earlier state then holds exactly what the files say. To change a rule, edit its file
and add a migration like this one that loads it again (docs/architecture.md, "Database rules")."""
from django.db import migrations

from studio.sql import rules_load


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0022_model_keys_under_the_install_secret"),
        ("environments", "0002_versions_immutable"),
    ]

    operations = [
        rules_load(
            "studio/sql/refuse_update.sql",
            "runs/sql/run_tally.sql",
            "runs/sql/at_0023/agreement_tally.sql",
            "runs/sql/at_0023/blind_tally.sql",
            "runs/sql/at_0023/review_state.sql",
            "runs/sql/rollout_claim.sql",
        ),
    ]
