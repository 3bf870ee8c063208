"""Reward labels are append-only: the database refuses any UPDATE of a label row."""
from django.db import migrations

from studio.sql import rules_load

SQL = """
CREATE TRIGGER rewardlabel_append_only BEFORE UPDATE ON runs_rewardlabel
    FOR EACH ROW EXECUTE FUNCTION studio_refuse_update();
"""
REVERSE = "DROP TRIGGER IF EXISTS rewardlabel_append_only ON runs_rewardlabel;"


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [rules_load("studio/sql/refuse_update.sql", check_bodies=False), migrations.RunSQL(SQL, REVERSE)]
