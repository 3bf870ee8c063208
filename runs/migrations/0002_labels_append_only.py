"""Reward labels are append-only: the database refuses any UPDATE of a label row."""
from django.db import migrations

SQL = """
CREATE OR REPLACE FUNCTION studio_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER rewardlabel_append_only BEFORE UPDATE ON runs_rewardlabel
    FOR EACH ROW EXECUTE FUNCTION studio_refuse_update();
"""
REVERSE = "DROP TRIGGER IF EXISTS rewardlabel_append_only ON runs_rewardlabel;"


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]
