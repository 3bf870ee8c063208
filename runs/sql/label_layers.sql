-- Labels in layers: a rollout's rollout-level labels are human decisions (append-only, each by its
-- reviewer) and verifier labels, each by a verifier version (`verifier_version_id`: the run's own at the
-- episode's end, another by re-verification; NULL is the run's own). The current label is the latest human
-- decision where one exists, else the newest label of the run's own verifier: a newer verifier never
-- supersedes a human. A rollout is in disagreement when, for some verifier version, its newest label is
-- newer than the latest human decision and its pass verdict (value > 0) differs from the human's.
-- Used by review_state.sql and agreement_tally.sql (load this file first).
-- Python reference: runs.labels (current_label_of, proposal_of, layers_of, in_disagreement, verifier_counts).
-- Edit here, then add a migration that loads this file again (docs/architecture.md, "Database rules").

CREATE OR REPLACE FUNCTION runs_current_label_of(rid bigint) RETURNS SETOF runs_rewardlabel AS $$
    SELECT l.* FROM runs_rewardlabel l JOIN runs_rollout r ON r.id = l.rollout_id JOIN runs_run u ON u.id = r.run_id
    WHERE l.rollout_id = rid AND l.step_id IS NULL
        AND (l.source = 'human' OR coalesce(l.verifier_version_id, u.environment_version_id) = u.environment_version_id)
    ORDER BY l.source = 'human' DESC, l.created_at DESC, l.id DESC LIMIT 1
$$ LANGUAGE sql STABLE;

-- The proposal: the newest label of the run's own verifier (what "approve" keeps, what the queue filters on).
CREATE OR REPLACE FUNCTION runs_proposal_of(rid bigint) RETURNS SETOF runs_rewardlabel AS $$
    SELECT l.* FROM runs_rewardlabel l JOIN runs_rollout r ON r.id = l.rollout_id JOIN runs_run u ON u.id = r.run_id
    WHERE l.rollout_id = rid AND l.step_id IS NULL AND l.source = 'verifier'
        AND coalesce(l.verifier_version_id, u.environment_version_id) = u.environment_version_id
    ORDER BY l.created_at DESC, l.id DESC LIMIT 1
$$ LANGUAGE sql STABLE;

-- Per verifier version that labelled the rollout: its newest label's verdict, whether that label is newer
-- than the latest human decision, and the human's verdict (NULL without one): an approval or override by
-- its value, a rejection without a value as the opposite of the proposal it rejected.
CREATE OR REPLACE FUNCTION runs_label_layers_of(rid bigint)
RETURNS TABLE(verifier_version_id bigint, pass boolean, newer boolean, human_pass boolean) AS $$
    WITH own AS (
        SELECT u.environment_version_id AS id FROM runs_rollout r JOIN runs_run u ON u.id = r.run_id WHERE r.id = rid
    ),
    labels AS (
        SELECT l.id, l.source, l.value, l.decision, l.created_at, coalesce(l.verifier_version_id, own.id) AS version_id,
            l.verifier_version_id IS NULL OR l.verifier_version_id = own.id AS is_own
        FROM runs_rewardlabel l CROSS JOIN own WHERE l.rollout_id = rid AND l.step_id IS NULL
    ),
    human AS (SELECT * FROM labels WHERE source = 'human' ORDER BY created_at DESC, id DESC LIMIT 1),
    verdict AS (
        SELECT CASE WHEN h.value IS NOT NULL THEN h.value > 0
            WHEN h.decision = 'rejected' THEN (
                SELECT NOT (p.value IS NOT NULL AND p.value > 0) FROM labels p
                WHERE p.source = 'verifier' AND p.is_own AND (p.created_at, p.id) < (h.created_at, h.id)
                ORDER BY p.created_at DESC, p.id DESC LIMIT 1)
            END AS hp, h.created_at, h.id
        FROM human h
    ),
    newest AS (
        SELECT DISTINCT ON (version_id) version_id, id, created_at, (value IS NOT NULL AND value > 0) AS pass
        FROM labels WHERE source = 'verifier' ORDER BY version_id, created_at DESC, id DESC
    )
    SELECT n.version_id, n.pass, coalesce((n.created_at, n.id) > (v.created_at, v.id), false), v.hp
    FROM newest n LEFT JOIN verdict v ON true
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION runs_disagreement_of(rid bigint) RETURNS boolean AS $$
    SELECT EXISTS (SELECT 1 FROM runs_label_layers_of(rid) WHERE newer AND human_pass IS NOT NULL AND pass <> human_pass)
$$ LANGUAGE sql STABLE;

-- VerifierTally: one rollout's contribution per verifier version (agreement_tally.sql keeps the sums).
CREATE OR REPLACE FUNCTION runs_verifier_counts_of(rid bigint)
RETURNS TABLE(verifier_version_id bigint, labelled int, compared int, agreeing int, disagreements int) AS $$
    SELECT verifier_version_id, 1, (human_pass IS NOT NULL)::int, coalesce(pass = human_pass, false)::int,
        (newer AND coalesce(pass <> human_pass, false))::int
    FROM runs_label_layers_of(rid)
$$ LANGUAGE sql STABLE;
