"""Input and output of the quality lab's API. The report document itself is report.audit_report's."""
from datetime import datetime
from typing import Literal

from ninja import Schema


class AuditIn(Schema):
    version: str  # "slug@N"
    seeds: str = "0-4"


class AuditOut(Schema):
    id: int
    version: str
    # passed: every line green; warnings: some amber, none red; flagged: any red (docs/quality.md "States").
    status: Literal["running", "passed", "warnings", "flagged", "cancelled", "failed"]
    message: str
    seeds: list[int]
    created_at: datetime
    finished_at: datetime | None
    runs: list[dict]
    # The audit report (as `audit_version --json` prints it) once the audit has ended with one.
    report: dict | None
    since_parent: list[str]


class ReverifyIn(Schema):
    version: str  # the version whose verifier re-scores
    source: str = ""  # the version whose stored rollouts are re-scored (default: the same version)


class ReverificationOut(Schema):
    id: int
    version: str  # whose verifier re-scores
    source: str  # whose stored rollouts are re-scored
    status: str  # queued | running | done | failed
    total: int
    replayed: int  # progress
    labelled: int  # new verifier labels, written when the job ends (none when it failed)
    skipped: list[dict]
    message: str
    created_at: datetime
    finished_at: datetime | None


class ReverifyPreviewOut(Schema):
    version: str
    source: str
    labels_may_change: int  # rollouts that may get a new verifier label (upper bound)
    human_decided: int  # of them, with a human decision: it stays their current label
    current_may_change: int  # current labels that may change (upper bound; 0 for another version's verifier)
    upper_bound: bool
    summary: str  # "N labels would change, M of them human-decided; those stay."
    detail: str


class GateOverrideIn(Schema):
    reason: str  # why the flagged version may be served to training (1 to 2,000 characters)


class TrainingGateIn(Schema):
    enabled: bool


class GateOut(Schema):
    version: str
    enabled: bool  # the team's training gate
    flagged: bool  # the version's newest judged audit is flagged
    audit: int | None  # that audit
    blocks: bool  # runs, remote episodes and exports of this version are refused (403, field version)
    message: str
    override: dict | None  # {by, reason, created_at} of the override that answers the flagged audit
