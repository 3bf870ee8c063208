-- A snapshot of agreement_tally.sql as migration 0023 loaded it: migrations 0013-0023 load this copy, and 0024 goes
-- back to it when reversed, so the live file (runs/sql/agreement_tally.sql) can change. Never edit it.
-- AgreementTally: one rollout's agreement contribution, from its rollout-level labels (each reviewer's
-- latest decision is a rating, judged against the verifier's latest proposal), kept in the rollout's own
-- row (with its human decisions and deciders) and summed in its run's NULL-rollout rows; a new label
-- takes the rollout's old contribution out and puts the new one in, here and in BlindTally
-- (runs_blind_add, blind_tally.sql) while the rollout's review is under way (0 < deciders < K).
-- Python reference: runs.review.selectors (agreement reads these rows; cohen_kappa / kappa_of_counts).
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_agreement_of(rid bigint)
RETURNS TABLE(reviewed int, tt int, tf int, ft int, ff int, multi int, pairs bigint, agreeing bigint) AS $$
    WITH labels AS (SELECT * FROM runs_rewardlabel WHERE rollout_id = rid AND step_id IS NULL),
    verifier AS (
        SELECT (value IS NOT NULL AND value > 0) AS pass FROM labels WHERE source = 'verifier'
        ORDER BY created_at DESC, id DESC LIMIT 1
    ),
    latest AS (
        SELECT DISTINCT ON (reviewer_id) decision, value FROM labels WHERE source = 'human'
        ORDER BY reviewer_id, created_at DESC, id DESC
    ),
    rated AS (
        SELECT v.pass AS v, CASE WHEN l.decision = 'approved' THEN v.pass WHEN l.decision = 'rejected' THEN NOT v.pass
                                 ELSE (l.value IS NOT NULL AND l.value > 0) END AS h
        FROM latest l CROSS JOIN verifier v
    ),
    agg AS (
        SELECT count(*)::bigint AS n, count(*) FILTER (WHERE h)::bigint AS p,
            count(*) FILTER (WHERE v AND h)::int AS tt, count(*) FILTER (WHERE v AND NOT h)::int AS tf,
            count(*) FILTER (WHERE NOT v AND h)::int AS ft, count(*) FILTER (WHERE NOT v AND NOT h)::int AS ff
        FROM rated
    )
    SELECT (EXISTS (SELECT 1 FROM latest))::int, tt, tf, ft, ff, (n > 1)::int,
        CASE WHEN n > 1 THEN n * (n - 1) / 2 ELSE 0 END,
        CASE WHEN n > 1 THEN p * (p - 1) / 2 + (n - p) * (n - p - 1) / 2 ELSE 0 END
    FROM agg
$$ LANGUAGE sql VOLATILE;

CREATE OR REPLACE FUNCTION runs_agreement_label() RETURNS trigger AS $$
DECLARE
    run_ bigint;
    k int;
    shard_ int := NEW.rollout_id % 8;
    was runs_agreementtally;
    now_ record;
    cur runs_agreementtally;
    human int := (NEW.source = 'human')::int;
    deciders_ bigint[];
BEGIN
    SELECT r.run_id, greatest(u.reviews_required, 1) INTO run_, k
    FROM runs_rollout r JOIN runs_run u ON u.id = r.run_id WHERE r.id = NEW.rollout_id;
    -- Two labels of one rollout at once: the second waits here for the first, then sees its label.
    INSERT INTO runs_agreementtally (run_id, rollout_id, shard, reviewed, approved, rejected, overridden, decisions,
        tt, tf, ft, ff, multi, pairs, agreeing, deciders)
    VALUES (run_, NEW.rollout_id, shard_, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '{}') ON CONFLICT (rollout_id) DO NOTHING;
    SELECT * INTO was FROM runs_agreementtally WHERE rollout_id = NEW.rollout_id FOR UPDATE;
    SELECT * INTO now_ FROM runs_agreement_of(NEW.rollout_id);
    SELECT coalesce(array_agg(DISTINCT l.reviewer_id ORDER BY l.reviewer_id), '{}') INTO deciders_
    FROM runs_rewardlabel l
    WHERE l.rollout_id = NEW.rollout_id AND l.step_id IS NULL AND l.source = 'human' AND l.reviewer_id IS NOT NULL;
    UPDATE runs_agreementtally SET reviewed = now_.reviewed, tt = now_.tt, tf = now_.tf, ft = now_.ft, ff = now_.ff,
        multi = now_.multi, pairs = now_.pairs, agreeing = now_.agreeing,
        approved = approved + human * coalesce((NEW.decision = 'approved')::int, 0),
        rejected = rejected + human * coalesce((NEW.decision = 'rejected')::int, 0),
        overridden = overridden + human * coalesce((NEW.decision = 'overridden')::int, 0),
        decisions = decisions + human, deciders = deciders_
    WHERE rollout_id = NEW.rollout_id RETURNING * INTO cur;
    INSERT INTO runs_agreementtally AS t (run_id, rollout_id, shard, reviewed, approved, rejected, overridden, decisions,
        tt, tf, ft, ff, multi, pairs, agreeing, deciders)
    VALUES (run_, NULL, shard_, now_.reviewed - was.reviewed,
        human * (NEW.decision = 'approved')::int, human * (NEW.decision = 'rejected')::int,
        human * (NEW.decision = 'overridden')::int, human,
        now_.tt - was.tt, now_.tf - was.tf, now_.ft - was.ft, now_.ff - was.ff,
        now_.multi - was.multi, now_.pairs - was.pairs, now_.agreeing - was.agreeing, '{}')
    ON CONFLICT (run_id, shard) WHERE rollout_id IS NULL DO UPDATE SET
        reviewed = t.reviewed + EXCLUDED.reviewed, approved = t.approved + EXCLUDED.approved,
        rejected = t.rejected + EXCLUDED.rejected, overridden = t.overridden + EXCLUDED.overridden,
        decisions = t.decisions + EXCLUDED.decisions, tt = t.tt + EXCLUDED.tt, tf = t.tf + EXCLUDED.tf,
        ft = t.ft + EXCLUDED.ft, ff = t.ff + EXCLUDED.ff, multi = t.multi + EXCLUDED.multi,
        pairs = t.pairs + EXCLUDED.pairs, agreeing = t.agreeing + EXCLUDED.agreeing;
    -- Blind review: the rollout's old contribution out, its new one in, where its review is under way.
    IF cardinality(was.deciders) > 0 AND cardinality(was.deciders) < k THEN
        PERFORM runs_blind_add(run_, shard_, was, -1);
    END IF;
    IF cardinality(cur.deciders) > 0 AND cardinality(cur.deciders) < k THEN
        PERFORM runs_blind_add(run_, shard_, cur, 1);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE TRIGGER rewardlabel_agreement AFTER INSERT ON runs_rewardlabel
    FOR EACH ROW WHEN (NEW.step_id IS NULL) EXECUTE FUNCTION runs_agreement_label();
