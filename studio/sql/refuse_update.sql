-- Immutable rows: a BEFORE UPDATE trigger that runs this refuses any UPDATE of its table's rows.
-- Attached to runs_rewardlabel (rewardlabel_append_only, runs migration 0002) and to
-- environments_environmentversion (environmentversion_immutable, environments migration 0002).
-- Python side: labels are only ever created (runs.review.services.label_decide); versions by version_commit.
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION studio_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
