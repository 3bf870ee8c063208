"""Versions never change: the database refuses any UPDATE of a version row."""
from django.db import migrations

SQL = """
CREATE OR REPLACE FUNCTION studio_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER environmentversion_immutable BEFORE UPDATE ON environments_environmentversion
    FOR EACH ROW EXECUTE FUNCTION studio_refuse_update();
"""
REVERSE = "DROP TRIGGER IF EXISTS environmentversion_immutable ON environments_environmentversion;"


class Migration(migrations.Migration):
    dependencies = [("environments", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]
