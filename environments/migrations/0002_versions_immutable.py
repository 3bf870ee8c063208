"""Versions never change: the database refuses any UPDATE of a version row."""
from django.db import migrations

from studio.sql import rules_load

SQL = """
CREATE TRIGGER environmentversion_immutable BEFORE UPDATE ON environments_environmentversion
    FOR EACH ROW EXECUTE FUNCTION studio_refuse_update();
"""
REVERSE = "DROP TRIGGER IF EXISTS environmentversion_immutable ON environments_environmentversion;"


class Migration(migrations.Migration):
    dependencies = [("environments", "0001_initial")]
    operations = [rules_load("studio/sql/refuse_update.sql", check_bodies=False), migrations.RunSQL(SQL, REVERSE)]
