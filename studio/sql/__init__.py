"""Database rules (trigger and SQL function bodies) each live in one .sql file (runs/sql/, studio/sql/);
migrations load them by path with `rules_load`, so a body has one source (docs/architecture.md,
"Database rules"). To change a rule: edit its file, then add a migration that loads it again.

Every file is idempotent (CREATE OR REPLACE FUNCTION / TRIGGER), so loading it twice is harmless. The
migration that first created a rule loads today's file too, whose body may read columns that later
migrations add: those loads leave the body unchecked until it is first called, as pg_dump does."""
from pathlib import Path

from django.db import migrations

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent

# Every rule file, in the order a migration that reloads them all runs them.
RULE_FILES = (
    "studio/sql/refuse_update.sql",
    "runs/sql/run_tally.sql",
    "runs/sql/label_layers.sql",
    "runs/sql/agreement_tally.sql",
    "runs/sql/blind_tally.sql",
    "runs/sql/review_state.sql",
    "runs/sql/rollout_claim.sql",
)


def rule_sql(path: str) -> str:
    """The text of one rule file, `path` from the project root (e.g. "runs/sql/review_state.sql")."""
    return (PROJECT_ROOT / path).read_text(encoding="utf-8")


def rules_load(*paths: str, reverse_sql=migrations.RunSQL.noop, check_bodies: bool = True) -> migrations.RunSQL:
    """A migration operation that runs these rule files. check_bodies=False for a migration older than
    the columns or tables today's bodies read (the body is then checked when it is first called)."""
    sql = "\n".join(rule_sql(path) for path in paths)
    if not check_bodies:
        sql = f"SET LOCAL check_function_bodies = off;\n{sql}\nRESET check_function_bodies;"
    return migrations.RunSQL(sql, reverse_sql)
