"""Agents, runs, rollouts, their steps, reward labels and annotations."""
import json

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from psycopg.types.json import Json

from environments.models import EnvironmentVersion
from studio.models import Team


class OrderedJSONField(models.JSONField):
    """JSON stored as written (PostgreSQL `json`): `jsonb` reorders an object's keys and turns -0.0
    into 0, so observations an agent must see exactly are kept this way. No SQL equality or key
    lookups on it; psycopg hands it back parsed, with its key order."""

    def db_type(self, connection):
        return "json"

    def from_db_value(self, value, expression, connection):
        return json.loads(value) if isinstance(value, (bytes, bytearray)) else value

    def get_db_prep_value(self, value, connection, prepared=False):
        if not prepared:
            value = self.get_prep_value(value)
        return Json(value, dumps=_dumps)


def _dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class AgentKind(models.TextChoices):
    SCRIPTED = "scripted", "Scripted"
    RANDOM = "random", "Random"
    OPENAI = "openai", "OpenAI-compatible model"
    HUMAN = "human", "Human"
    REMOTE = "remote", "Remote (training loop)"


class Agent(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=AgentKind.choices)
    config = models.JSONField(default=dict, blank=True)
    code = models.TextField(blank=True)
    code_hash = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="agent_name_unique_per_team")]
        ordering = ["name"]

    def __str__(self):
        return self.name


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"


class RunPurpose(models.TextChoices):
    """Why a run exists. Lists, the environments card, comparisons and the default review queue show
    evaluations; the others are a filter away (docs/quality.md, "Runs by purpose")."""

    EVALUATION = "evaluation", "Evaluation"  # started by a person or the API (New run, POST /runs, a rerun)
    AUDIT = "audit", "Audit"  # queued by a quality audit: probes, the oracle, determinism pairs
    REVERIFY = "reverify", "Re-verification"
    SESSION = "session", "Session"  # remote episodes (sessions API, OpenEnv, Gym) through one credential and version
    PLAY = "play", "Play"  # an author acting as the agent from the studio page


class Run(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="runs")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.RESTRICT, related_name="runs")
    agent = models.ForeignKey(Agent, on_delete=models.RESTRICT, related_name="runs")
    task_ids = models.JSONField(default=list)
    seeds = models.JSONField(default=list)
    repeats = models.PositiveIntegerField(default=1)
    limits = models.JSONField(default=dict, blank=True)
    reviews_required = models.PositiveSmallIntegerField(default=1)
    # A curriculum run's rollouts get their task when dispatched, by this strategy (runs/curriculum/sampler.py).
    curriculum = models.CharField(max_length=16, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    purpose = models.CharField(max_length=16, choices=RunPurpose.choices, default=RunPurpose.EVALUATION)
    # A session run's group (runs.episodes.interactive.session_run_for): the credential its episodes came
    # through ("token:<id>", "openenv-key:<id>") and the run name the client gave, if any; "" otherwise.
    session_key = models.CharField(max_length=300, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["team", "-created_at"]),
            # The runs list and API by purpose (and its counts), by agent, by version: a page costs its size.
            models.Index(fields=["team", "purpose", "-created_at", "-id"], name="run_team_purpose"),
            models.Index(fields=["agent", "-created_at", "-id"], name="run_agent_created"),
            models.Index(fields=["environment_version", "-created_at", "-id"], name="run_version_created"),
            models.Index(fields=["team", "environment_version", "agent", "session_key", "-created_at"],
                         name="run_session_group", condition=models.Q(purpose="session")),
        ]

    def __str__(self):
        return f"run {self.pk}"


class RolloutStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    ERRORED = "errored", "Errored"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"


# A rollout's end_reason when the studio's own machinery failed it (a worker that kept dying, an
# episode host or Redis lost, a bug in the worker), not the environment or the agent: its reward says
# nothing about either, and the runs list and the API filter on it.
INFRA_ERROR = "infra_error"


FINISHED_ROLLOUT_STATUSES = (
    RolloutStatus.SUCCEEDED,
    RolloutStatus.FAILED,
    RolloutStatus.ERRORED,
    RolloutStatus.TIMED_OUT,
    RolloutStatus.CANCELLED,
)


class Rollout(models.Model):
    """One episode of an agent in an environment version, for one task and seed."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="rollouts")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollouts")
    task_id = models.CharField(max_length=200)
    seed = models.BigIntegerField()
    repeat = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.QUEUED)
    total_reward = models.FloatField(default=0.0)
    verifier_reward = models.FloatField(null=True, blank=True)
    verifier_reason = models.TextField(blank=True)
    verifier_error = models.TextField(blank=True)
    step_count = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    reproduction = models.JSONField(default=dict, blank=True)
    # What reset() returned: the state the agent's first action answers (steps hold what followed).
    initial_observation = OrderedJSONField(null=True, blank=True)
    # What reset() gave beside the observation (Gymnasium's reset info).
    reset_info = OrderedJSONField(default=dict, blank=True)
    # Why the episode stopped: terminated, truncated, max_steps, cancelled, timeout, error.
    end_reason = models.CharField(max_length=16, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Queued, but its message was dropped because its team was at TEAM_MAX_RUNNING_ROLLOUTS: the next
    # rollout of the team to end sends it again (runs.services.team_slots_freed), so a capped team's
    # backlog never circles through the broker while other teams wait.
    parked = models.BooleanField(default=False)
    # What its steps and reset observation take in the database (their JSON, written by the worker's
    # flushes): the rollouts' part of a team's stored bytes (studio/storage_quota.py).
    stored_bytes = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    rerun_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reruns")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["run", "status"]),
            models.Index(fields=["team", "status"]),
            models.Index(fields=["run", "finished_at", "id"], name="rollout_run_finished"),  # the chart's latest points
            models.Index(fields=["team", "id"], name="rollout_parked", condition=models.Q(parked=True, status="queued")),
        ]

    def __str__(self):
        return f"rollout {self.pk} ({self.task_id}, seed {self.seed})"

    @property
    def is_finished(self):
        return self.status in FINISHED_ROLLOUT_STATUSES

    @property
    def duration_s(self):
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class RunTally(models.Model):
    """What a run's figures add up, per task, kept by a database trigger on every rollout change
    (runs/sql/run_tally.sql): so a run page or list costs the number of tasks, not of rollouts. Each task has
    TALLY_SHARDS rows (by rollout id) so workers finishing rollouts of one task don't queue on one row.
    Read only through runs.figures; never written by Python."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="tallies", db_constraint=False)
    task_id = models.CharField(max_length=200)
    shard = models.PositiveSmallIntegerField()
    total = models.IntegerField(default=0)
    n_queued = models.IntegerField(default=0)
    n_running = models.IntegerField(default=0)
    n_succeeded = models.IntegerField(default=0)
    n_failed = models.IntegerField(default=0)
    n_errored = models.IntegerField(default=0)
    n_timed_out = models.IntegerField(default=0)
    n_cancelled = models.IntegerField(default=0)
    return_n = models.IntegerField(default=0)
    return_sum = models.FloatField(default=0.0)
    verifier_n = models.IntegerField(default=0)
    verifier_sum = models.FloatField(default=0.0)
    steps_sum = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "task_id", "shard"], name="run_tally_unique")]


TALLY_SHARDS = 8


class ReviewState(models.Model):
    """Where a rollout stands in review, kept by a database trigger on every new rollout-level label
    (runs/sql/review_state.sql): the verifier's latest proposal, how many distinct reviewers decided it, and whether
    it still waits for reviews (a proposal and fewer deciders than its run's reviews_required). The review
    queue reads the open ones through a partial index, so a page costs its page. Never written by Python."""

    rollout = models.OneToOneField(Rollout, on_delete=models.DO_NOTHING, primary_key=True, related_name="review_state",
                                   db_constraint=False)
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    proposed_reward = models.FloatField(null=True)
    has_proposal = models.BooleanField(default=False)
    deciders = models.IntegerField(default=0)
    decider_ids = ArrayField(models.BigIntegerField(), default=list)  # who decided
    open = models.BooleanField(default=False)
    # A verifier label newer than the latest human decision judges the outcome otherwise (runs.labels): the
    # human label stays current; the queue's "disagreement" filter walks these through their index.
    disagreement = models.BooleanField(default=False, db_default=False)  # db_default: the rules as of 0023 omit it
    # The run's purpose (Run.purpose, fixed when the run is created), copied by the rule so the queue's
    # purpose filter reads the state's own index instead of joining every state to its run.
    purpose = models.CharField(max_length=16, choices=RunPurpose.choices, default=RunPurpose.EVALUATION)

    class Meta:
        indexes = [
            # The queue of a reviewer walks it, skipping the ones they decided by the ids it carries (no
            # lookup of their labels per rollout: an index-only scan, however many they decided).
            models.Index(fields=["team", "rollout"], condition=models.Q(open=True), include=["decider_ids"],
                         name="review_state_open_by"),
            # The same walk for one purpose (the default queue: evaluations), however many open states of
            # other purposes (audits, sessions) come before them.
            models.Index(fields=["team", "purpose", "rollout"], condition=models.Q(open=True), include=["decider_ids"],
                         name="review_state_open_purpose"),
            models.Index(fields=["team", "rollout"], condition=models.Q(disagreement=True), name="review_state_disagreement"),
        ]


class ReviewCursor(models.Model):
    """Where a reviewer's queue starts (runs.review.selectors): every open review state of the team with a
    rollout id below `below`, other than the few in `holes`, was decided by the reviewer. Their queue is
    the holes and the open states from `below` on, so a page costs the page, not the rollouts they decided
    that still wait for other reviewers. Moved forward by the queue reads (under an advisory lock of the
    team); a rollout that opens behind a cursor joins its holes (the review state trigger, runs/sql/review_state.sql)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    below = models.BigIntegerField(default=0)
    holes = ArrayField(models.BigIntegerField(), default=list)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "reviewer"], name="one_review_cursor")]


class AgreementCounts(models.Model):
    """The sums agreement figures are made of (runs.review.selectors.agreement), as the tallies keep them."""

    reviewed = models.IntegerField(default=0)  # rollouts with a human decision
    approved = models.IntegerField(default=0)
    rejected = models.IntegerField(default=0)
    overridden = models.IntegerField(default=0)
    decisions = models.IntegerField(default=0)  # every human decision, not only the latest
    tt = models.IntegerField(default=0)  # verifier passes, human passes; tf, ft, ff likewise
    tf = models.IntegerField(default=0)
    ft = models.IntegerField(default=0)
    ff = models.IntegerField(default=0)
    multi = models.IntegerField(default=0)  # rollouts rated by more than one reviewer
    pairs = models.BigIntegerField(default=0)
    agreeing = models.BigIntegerField(default=0)
    disagreements = models.IntegerField(default=0, db_default=0)  # rollouts where a newer verifier disagrees with the human (runs.labels)

    class Meta:
        abstract = True


class AgreementTally(AgreementCounts):
    """What a run's agreement figures add up (runs.review.selectors.agreement), kept by a database
    trigger on every new rollout-level label (runs/sql/agreement_tally.sql), like RunTally: `rollout_id` NULL rows are a
    run's totals (TALLY_SHARDS of them), the others each rollout's own contribution, so a new label
    replaces its rollout's old contribution in the run's totals. A rollout's row also holds its human
    decisions (approved ... decisions) and who decided it (`deciders`), for BlindTally (runs/sql/blind_tally.sql).
    Read only through that selector."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    rollout = models.OneToOneField(Rollout, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, null=True)
    shard = models.PositiveSmallIntegerField()
    deciders = ArrayField(models.BigIntegerField(), default=list)  # a rollout's row: its human reviewers' ids

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "shard"], condition=models.Q(rollout__isnull=True), name="agreement_run_total"),
        ]


class BlindTally(AgreementCounts):
    """What blind review takes out of a run's agreement figures for a reviewer who owes reviews, kept by
    the agreement trigger (runs/sql/agreement_tally.sql, blind_tally.sql). Over the run's rollouts whose
    review is under way (some, but fewer than reviews_required, humans decided): `reviewer` NULL rows sum
    their contributions (as AgreementTally's rollout rows hold them), a reviewer's rows sum those of the
    ones that reviewer decided. A reviewer owes exactly the under-way rollouts they did not decide, so what is hidden from
    them is the first less the second: a fixed number of rows, however many rollouts are under way.
    Read only through runs.review.selectors.agreement."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, related_name="+",
                                 db_constraint=False, null=True)
    shard = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "reviewer", "shard"], nulls_distinct=False, name="blind_tally_key"),
        ]


class VerifierTally(models.Model):
    """Agreement per verifier version (the run's own and each one that re-verified its rollouts), kept by the
    agreement trigger (runs/sql/agreement_tally.sql) from runs_verifier_counts_of (runs/sql/label_layers.sql):
    over the run's rollouts the version labelled, how many have a human verdict to compare with, how many of
    its newest labels agree with it, and how many are newer than the human decision and disagree. `rollout_id`
    NULL rows are a run's totals (TALLY_SHARDS per version); the others each rollout's contribution.
    Read only through runs.review.selectors.agreement."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    rollout = models.ForeignKey(Rollout, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, null=True)
    verifier_version = models.ForeignKey(EnvironmentVersion, on_delete=models.DO_NOTHING, related_name="+",
                                         db_constraint=False)
    shard = models.PositiveSmallIntegerField()
    labelled = models.IntegerField(default=0)
    compared = models.IntegerField(default=0)
    agreeing = models.IntegerField(default=0)
    disagreements = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "verifier_version", "shard"], condition=models.Q(rollout__isnull=True),
                                    name="verifier_tally_run_total"),
            models.UniqueConstraint(fields=["rollout", "verifier_version"], condition=models.Q(rollout__isnull=False),
                                    name="verifier_tally_rollout"),
        ]


class VerifierBlindTally(models.Model):
    """What blind review takes out of VerifierTally for a reviewer who owes reviews, as BlindTally does for
    AgreementTally (runs/sql/blind_tally.sql, runs_verifier_blind_add): per verifier version, `reviewer` NULL
    rows sum the contributions of the run's rollouts whose review is under way, a reviewer's rows those of
    the ones that reviewer decided. Read only through runs.review.selectors.agreement."""

    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, related_name="+",
                                 db_constraint=False, null=True)
    verifier_version = models.ForeignKey(EnvironmentVersion, on_delete=models.DO_NOTHING, related_name="+",
                                         db_constraint=False)
    shard = models.PositiveSmallIntegerField()
    labelled = models.IntegerField(default=0)
    compared = models.IntegerField(default=0)
    agreeing = models.IntegerField(default=0)
    disagreements = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "reviewer", "verifier_version", "shard"], nulls_distinct=False,
                                    name="verifier_blind_tally_key"),
        ]


class Step(models.Model):
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    action = models.JSONField(null=True)
    observation = OrderedJSONField(null=True)
    reward = models.FloatField(default=0.0)
    terminated = models.BooleanField(default=False)
    truncated = models.BooleanField(default=False)
    info = OrderedJSONField(default=dict)
    artifact = models.FileField(upload_to="artifacts/%Y/%m/%d", null=True, blank=True)
    elapsed_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rollout", "index"], name="step_index_unique")]
        ordering = ["rollout", "index"]

    def __str__(self):
        return f"step {self.index} of rollout {self.rollout_id}"


class LabelSource(models.TextChoices):
    VERIFIER = "verifier", "Verifier"
    HUMAN = "human", "Human"


class LabelDecision(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    OVERRIDDEN = "overridden", "Overridden"


class RewardLabel(models.Model):
    """Append-only: each decision is a new row. Two layers (runs.labels): human decisions, and verifier labels
    by verifier version; the current label is the latest human decision, else the newest label of the run's
    own verifier, so a re-verification never supersedes a human."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="labels")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, null=True, blank=True, related_name="labels")
    source = models.CharField(max_length=16, choices=LabelSource.choices)
    value = models.FloatField(null=True, blank=True)
    decision = models.CharField(max_length=16, choices=LabelDecision.choices)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A verifier label's verifier: the version whose verify() gave it (a re-verification's); NULL for the run's own.
    verifier_version = models.ForeignKey(EnvironmentVersion, on_delete=models.RESTRICT, null=True, blank=True,
                                         related_name="+")
    rationale = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "created_at", "id"]
        indexes = [
            models.Index(fields=["rollout", "-created_at"]),
            # The review queue asks "has this reviewer decided this rollout?" for every candidate.
            models.Index(
                fields=["rollout", "reviewer"], name="human_rollout_decisions",
                condition=models.Q(step__isnull=True, source="human"),
            ),
        ]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("Reward labels are append-only.")
        super().save(*args, **kwargs)


class Annotation(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="annotations")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, null=True, blank=True, related_name="annotations")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    text = models.TextField(blank=True)
    tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]


class AgentSecret(models.Model):
    """An agent's API key, kept apart from `Agent.config` so that no schema, export, log line or
    reproduction record that shows the config can show the key; only the worker's model client reads it."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="secret")
    api_key = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __repr__(self):
        return f"<AgentSecret of agent {self.agent_id}: {'set' if self.api_key else 'empty'}>"

    __str__ = __repr__


# The quality lab's models belong to this app (one migration history); they live with their domain.
from .quality.models import Audit, AuditRun  # noqa: E402,F401
from .curriculum.models import TaskStat  # noqa: E402,F401
