-- BlindTally: a rollout whose review is under way (0 < deciders < K) counts in its run's NULL-reviewer
-- rows and in each of its deciders' rows; runs_agreement_label (agreement_tally.sql) calls this with
-- sign -1 for the rollout's old contribution and +1 for its new one.
-- Python reference: runs.review.selectors.agreement(viewer=...) and rollouts_owed_by (blind review).
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_blind_add(run_ bigint, shard_ int, c runs_agreementtally, sign int) RETURNS void AS $$
    INSERT INTO runs_blindtally AS b (run_id, reviewer_id, shard, reviewed, approved, rejected, overridden, decisions,
        tt, tf, ft, ff, multi, pairs, agreeing, disagreements)
    SELECT run_, who, shard_, sign * c.reviewed, sign * c.approved, sign * c.rejected, sign * c.overridden,
        sign * c.decisions, sign * c.tt, sign * c.tf, sign * c.ft, sign * c.ff, sign * c.multi, sign * c.pairs,
        sign * c.agreeing, sign * c.disagreements
    FROM unnest(array_prepend(NULL::bigint, c.deciders)) AS who
    ON CONFLICT (run_id, reviewer_id, shard) DO UPDATE SET
        reviewed = b.reviewed + EXCLUDED.reviewed, approved = b.approved + EXCLUDED.approved,
        rejected = b.rejected + EXCLUDED.rejected, overridden = b.overridden + EXCLUDED.overridden,
        decisions = b.decisions + EXCLUDED.decisions, tt = b.tt + EXCLUDED.tt, tf = b.tf + EXCLUDED.tf,
        ft = b.ft + EXCLUDED.ft, ff = b.ff + EXCLUDED.ff, multi = b.multi + EXCLUDED.multi,
        pairs = b.pairs + EXCLUDED.pairs, agreeing = b.agreeing + EXCLUDED.agreeing,
        disagreements = b.disagreements + EXCLUDED.disagreements
$$ LANGUAGE sql VOLATILE;

-- VerifierBlindTally likewise for a rollout's per-verifier-version contributions (its VerifierTally rows,
-- agreement_tally.sql), for its run's NULL-reviewer rows and each of its deciders' rows.
CREATE OR REPLACE FUNCTION runs_verifier_blind_add(run_ bigint, shard_ int, rid bigint, deciders bigint[], sign int)
RETURNS void AS $$
    INSERT INTO runs_verifierblindtally AS b (run_id, reviewer_id, verifier_version_id, shard, labelled, compared,
        agreeing, disagreements)
    SELECT run_, who, t.verifier_version_id, shard_, sign * t.labelled, sign * t.compared, sign * t.agreeing,
        sign * t.disagreements
    FROM runs_verifiertally t CROSS JOIN unnest(array_prepend(NULL::bigint, deciders)) AS who
    WHERE t.rollout_id = rid
    ON CONFLICT (run_id, reviewer_id, verifier_version_id, shard) DO UPDATE SET
        labelled = b.labelled + EXCLUDED.labelled, compared = b.compared + EXCLUDED.compared,
        agreeing = b.agreeing + EXCLUDED.agreeing, disagreements = b.disagreements + EXCLUDED.disagreements
$$ LANGUAGE sql VOLATILE;
