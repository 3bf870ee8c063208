-- The worker's claim of a queued rollout as one round trip (runs.services.rollout_claim_queued), and
-- parked rollouts: those of a team at its cap of running rollouts, sent again as the team's rollouts end.
-- Functions, because the team-cap count must see every claim committed before it: the claim takes the
-- team's advisory lock first, and in READ COMMITTED each statement of a volatile function takes a new
-- snapshot, so the UPDATE after the lock counts the running rollouts as they are once the lock is held.
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_rollout_claim(p_rollout bigint, p_worker text, p_cap integer, p_lock_class integer)
RETURNS TABLE (rollout_id bigint, run_status varchar) AS $$
DECLARE
    v_team bigint;
BEGIN
    IF p_cap > 0 THEN
        SELECT r.team_id INTO v_team FROM runs_rollout r WHERE r.id = p_rollout AND r.status = 'queued';
        IF v_team IS NULL THEN
            RETURN;
        END IF;
        PERFORM pg_advisory_xact_lock(p_lock_class, v_team::integer);
    END IF;
    RETURN QUERY
    UPDATE runs_rollout AS r SET status = 'running', attempts = r.attempts + 1, worker = p_worker, parked = false,
        heartbeat_at = now(), started_at = now(), finished_at = NULL, step_count = 0, total_reward = 0,
        error = '', verifier_error = '', verifier_reason = '', end_reason = '', verifier_reward = NULL
    FROM runs_run AS run
    WHERE r.id = p_rollout AND r.status = 'queued' AND r.attempts = 0 AND run.id = r.run_id
        AND run.status <> 'cancelled'
        AND (p_cap <= 0 OR (
            SELECT count(*) FROM runs_rollout x JOIN runs_run xr ON xr.id = x.run_id JOIN runs_agent a ON a.id = xr.agent_id
            WHERE x.team_id = r.team_id AND x.status = 'running' AND a.kind NOT IN ('remote', 'human')) < p_cap)
    RETURNING r.id, run.status;
END;
$$ LANGUAGE plpgsql VOLATILE;

-- Parked rollouts of a team that may run now (as many as its cap leaves free; all when there is no
-- cap) are unparked and returned, for the caller to enqueue. Under the team's lock, so a rollout parked
-- by a claim that had just counted the team at its cap is seen by the next end of one of its rollouts.
CREATE OR REPLACE FUNCTION runs_team_unpark(p_team bigint, p_cap integer, p_lock_class integer)
RETURNS SETOF bigint AS $$
DECLARE
    v_free bigint := 2147483647;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runs_rollout WHERE team_id = p_team AND parked AND status = 'queued') THEN
        RETURN;
    END IF;
    IF p_cap > 0 THEN
        PERFORM pg_advisory_xact_lock(p_lock_class, p_team::integer);
        SELECT p_cap - count(*) INTO v_free FROM runs_rollout x JOIN runs_run xr ON xr.id = x.run_id
            JOIN runs_agent a ON a.id = xr.agent_id
            WHERE x.team_id = p_team AND x.status = 'running' AND a.kind NOT IN ('remote', 'human');
        IF v_free <= 0 THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY UPDATE runs_rollout SET parked = false WHERE id IN (
        SELECT id FROM runs_rollout WHERE team_id = p_team AND parked AND status = 'queued'
        ORDER BY id LIMIT v_free FOR UPDATE SKIP LOCKED)
    RETURNING id;
END;
$$ LANGUAGE plpgsql VOLATILE;
