-- ReviewState: per rollout with rollout-level labels, the proposal (the newest label of the run's own
-- verifier, runs_proposal_of in label_layers.sql), who decided, whether it still waits for reviews (a proposal
-- and fewer deciders than its run's reviews_required) and whether a newer verifier disagrees with the
-- human decision (runs_disagreement_of). An audit's probe and determinism rollouts never wait for reviews (their
-- rewards measure the verifier, not the environment's agents): their state is never open.
-- A rollout that opens joins the holes of the review cursors past it, under the shared advisory lock
-- 32418 (0x7EA2, runs.review.selectors.CURSOR_LOCK), so no cursor moves past an opening it could not see.
-- Python reference: runs.review.services.label_decide (deciders, K), runs.review.selectors (queue), runs.labels.
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_review_state_of(rid bigint) RETURNS void AS $$
    INSERT INTO runs_reviewstate AS s (rollout_id, team_id, proposed_reward, has_proposal, deciders, decider_ids, open,
        disagreement)
    SELECT r.id, r.team_id, p.value, p.id IS NOT NULL, d.n, d.ids,
        p.id IS NOT NULL AND d.n < greatest(u.reviews_required, 1)
            AND NOT EXISTS (SELECT 1 FROM runs_auditrun a WHERE a.run_id = u.id AND a.role IN ('probe', 'determinism')),
        runs_disagreement_of(r.id)
    FROM runs_rollout r JOIN runs_run u ON u.id = r.run_id
    LEFT JOIN LATERAL runs_proposal_of(r.id) p ON true
    CROSS JOIN LATERAL (
        SELECT count(DISTINCT l.reviewer_id)::int AS n,
            coalesce(array_agg(DISTINCT l.reviewer_id) FILTER (WHERE l.reviewer_id IS NOT NULL), '{}') AS ids
        FROM runs_rewardlabel l
        WHERE l.rollout_id = r.id AND l.step_id IS NULL AND l.source = 'human'
    ) d
    WHERE r.id = rid
    ON CONFLICT (rollout_id) DO UPDATE SET proposed_reward = EXCLUDED.proposed_reward,
        has_proposal = EXCLUDED.has_proposal, deciders = EXCLUDED.deciders, decider_ids = EXCLUDED.decider_ids,
        open = EXCLUDED.open, disagreement = EXCLUDED.disagreement
$$ LANGUAGE sql VOLATILE;

CREATE OR REPLACE FUNCTION runs_review_state_label() RETURNS trigger AS $$
DECLARE
    was_open boolean;
    now_open boolean;
BEGIN
    -- Two labels of one rollout at once: the row lock makes the second recount after the first.
    INSERT INTO runs_reviewstate (rollout_id, team_id, proposed_reward, has_proposal, deciders, decider_ids, open, disagreement)
    VALUES (NEW.rollout_id, NEW.team_id, NULL, false, 0, '{}', false, false) ON CONFLICT (rollout_id) DO NOTHING;
    SELECT open INTO was_open FROM runs_reviewstate WHERE rollout_id = NEW.rollout_id FOR UPDATE;
    PERFORM runs_review_state_of(NEW.rollout_id);
    SELECT open INTO now_open FROM runs_reviewstate WHERE rollout_id = NEW.rollout_id;
    IF now_open AND NOT was_open THEN
        PERFORM pg_advisory_xact_lock_shared(32418, NEW.team_id::integer);
        UPDATE runs_reviewcursor SET holes = array_append(holes, NEW.rollout_id)
        WHERE team_id = NEW.team_id AND below > NEW.rollout_id AND NOT (NEW.rollout_id = ANY(holes));
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER rewardlabel_review_state AFTER INSERT ON runs_rewardlabel
    FOR EACH ROW WHEN (NEW.step_id IS NULL) EXECUTE FUNCTION runs_review_state_label();

CREATE OR REPLACE FUNCTION runs_review_state_forget() RETURNS trigger AS $$
BEGIN
    DELETE FROM runs_reviewstate WHERE rollout_id = OLD.id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE TRIGGER rollout_review_state_forget AFTER DELETE ON runs_rollout
    FOR EACH ROW EXECUTE FUNCTION runs_review_state_forget();
