-- RunTally: each rollout contributes to its (run, task, id % 8) row by its status and, once done, its
-- rewards and steps, by the definitions of runs/figures.py (done = succeeded, failed, errored, timed_out;
-- a return for succeeded and failed). An UPDATE that changes nothing counted (a running rollout's step
-- count, its heartbeat) costs one comparison. A deleted run's rows go with it.
-- Python reference: runs.figures (_Tally.figures, rollout_succeeded decides succeeded vs failed).
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_tally_add(r runs_rollout, sign integer, upsert boolean) RETURNS void AS $$
DECLARE
    done boolean := r.status IN ('succeeded', 'failed', 'errored', 'timed_out');
    ran boolean := r.status IN ('succeeded', 'failed');
BEGIN
    IF upsert THEN
        INSERT INTO runs_runtally AS t (run_id, task_id, shard, total, n_queued, n_running, n_succeeded, n_failed,
            n_errored, n_timed_out, n_cancelled, return_n, return_sum, verifier_n, verifier_sum, steps_sum)
        VALUES (r.run_id, r.task_id, r.id % 8, sign,
            sign * (r.status = 'queued')::int, sign * (r.status = 'running')::int,
            sign * (r.status = 'succeeded')::int, sign * (r.status = 'failed')::int,
            sign * (r.status = 'errored')::int, sign * (r.status = 'timed_out')::int,
            sign * (r.status = 'cancelled')::int,
            sign * ran::int, CASE WHEN ran THEN sign * r.total_reward ELSE 0 END,
            sign * (done AND r.verifier_reward IS NOT NULL)::int,
            CASE WHEN done AND r.verifier_reward IS NOT NULL THEN sign * r.verifier_reward ELSE 0 END,
            CASE WHEN done THEN sign * r.step_count ELSE 0 END)
        ON CONFLICT (run_id, task_id, shard) DO UPDATE SET
            total = t.total + EXCLUDED.total, n_queued = t.n_queued + EXCLUDED.n_queued,
            n_running = t.n_running + EXCLUDED.n_running, n_succeeded = t.n_succeeded + EXCLUDED.n_succeeded,
            n_failed = t.n_failed + EXCLUDED.n_failed, n_errored = t.n_errored + EXCLUDED.n_errored,
            n_timed_out = t.n_timed_out + EXCLUDED.n_timed_out, n_cancelled = t.n_cancelled + EXCLUDED.n_cancelled,
            return_n = t.return_n + EXCLUDED.return_n, return_sum = t.return_sum + EXCLUDED.return_sum,
            verifier_n = t.verifier_n + EXCLUDED.verifier_n, verifier_sum = t.verifier_sum + EXCLUDED.verifier_sum,
            steps_sum = t.steps_sum + EXCLUDED.steps_sum;
    ELSE
        -- A deleted rollout: take it out of a tally row that still exists (a deleted run's rows go first).
        UPDATE runs_runtally t SET total = t.total - 1,
            n_queued = t.n_queued - (r.status = 'queued')::int, n_running = t.n_running - (r.status = 'running')::int,
            n_succeeded = t.n_succeeded - (r.status = 'succeeded')::int, n_failed = t.n_failed - (r.status = 'failed')::int,
            n_errored = t.n_errored - (r.status = 'errored')::int, n_timed_out = t.n_timed_out - (r.status = 'timed_out')::int,
            n_cancelled = t.n_cancelled - (r.status = 'cancelled')::int,
            return_n = t.return_n - ran::int, return_sum = t.return_sum - CASE WHEN ran THEN r.total_reward ELSE 0 END,
            verifier_n = t.verifier_n - (done AND r.verifier_reward IS NOT NULL)::int,
            verifier_sum = t.verifier_sum - CASE WHEN done AND r.verifier_reward IS NOT NULL THEN r.verifier_reward ELSE 0 END,
            steps_sum = t.steps_sum - CASE WHEN done THEN r.step_count ELSE 0 END
        WHERE t.run_id = r.run_id AND t.task_id = r.task_id AND t.shard = r.id % 8;
    END IF;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION runs_tally_rollout() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM runs_tally_add(NEW, 1, true);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM runs_tally_add(OLD, -1, false);
    ELSIF NEW.run_id <> OLD.run_id OR NEW.task_id <> OLD.task_id OR NEW.status <> OLD.status
          OR (NEW.status IN ('succeeded', 'failed', 'errored', 'timed_out') AND (NEW.total_reward IS DISTINCT FROM OLD.total_reward
              OR NEW.verifier_reward IS DISTINCT FROM OLD.verifier_reward OR NEW.step_count <> OLD.step_count)) THEN
        PERFORM runs_tally_add(OLD, -1, true);
        PERFORM runs_tally_add(NEW, 1, true);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE TRIGGER rollout_tally AFTER INSERT OR UPDATE OR DELETE ON runs_rollout
    FOR EACH ROW EXECUTE FUNCTION runs_tally_rollout();

CREATE OR REPLACE FUNCTION runs_tally_forget_run() RETURNS trigger AS $$
BEGIN
    DELETE FROM runs_runtally WHERE run_id = OLD.id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE TRIGGER run_tally_forget AFTER DELETE ON runs_run FOR EACH ROW EXECUTE FUNCTION runs_tally_forget_run();
