-- A snapshot of blind_tally.sql as migration 0023 loaded it: migrations 0013-0023 load this copy, and 0024 goes
-- back to it when reversed, so the live file (runs/sql/blind_tally.sql) can change. Never edit it.
-- BlindTally: a rollout whose review is under way (0 < deciders < K) counts in its run's NULL-reviewer
-- rows and in each of its deciders' rows; runs_agreement_label (agreement_tally.sql) calls this with
-- sign -1 for the rollout's old contribution and +1 for its new one.
-- Python reference: runs.review.selectors.agreement(viewer=...) and rollouts_owed_by (blind review).
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_blind_add(run_ bigint, shard_ int, c runs_agreementtally, sign int) RETURNS void AS $$
    INSERT INTO runs_blindtally AS b (run_id, reviewer_id, shard, reviewed, approved, rejected, overridden, decisions,
        tt, tf, ft, ff, multi, pairs, agreeing)
    SELECT run_, who, shard_, sign * c.reviewed, sign * c.approved, sign * c.rejected, sign * c.overridden,
        sign * c.decisions, sign * c.tt, sign * c.tf, sign * c.ft, sign * c.ff, sign * c.multi, sign * c.pairs,
        sign * c.agreeing
    FROM unnest(array_prepend(NULL::bigint, c.deciders)) AS who
    ON CONFLICT (run_id, reviewer_id, shard) DO UPDATE SET
        reviewed = b.reviewed + EXCLUDED.reviewed, approved = b.approved + EXCLUDED.approved,
        rejected = b.rejected + EXCLUDED.rejected, overridden = b.overridden + EXCLUDED.overridden,
        decisions = b.decisions + EXCLUDED.decisions, tt = b.tt + EXCLUDED.tt, tf = b.tf + EXCLUDED.tf,
        ft = b.ft + EXCLUDED.ft, ff = b.ff + EXCLUDED.ff, multi = b.multi + EXCLUDED.multi,
        pairs = b.pairs + EXCLUDED.pairs, agreeing = b.agreeing + EXCLUDED.agreeing
$$ LANGUAGE sql VOLATILE;
