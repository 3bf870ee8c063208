"""Review reads: the per-team queue and its "next" item, label history as each viewer may see it,
annotations, and agreement figures (verifier vs human, human vs human) per version or run."""
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Coalesce, Greatest

from environments.selectors import without_version_content
from studio.models import ROLE_PERMISSIONS, Membership

from ..models import AgreementCounts, Annotation, LabelSource, ReviewCursor, ReviewState, RewardLabel, Rollout, RunPurpose

# A version's verifier is flagged when humans often change its verdicts.
FLAG_MIN_DECISIONS = 5
FLAG_OVERRIDE_RATE = 0.3
VERIFIER_OUTCOMES = ("pass", "fail")


@dataclass(frozen=True)
class QueueFilters:
    """What a reviewer narrows the queue to; every field optional. Rewards are the verifier's proposal."""

    environment: str | None = None  # environment slug
    version: int | None = None  # version number (with environment) or, without it, any environment's number
    run_id: int | None = None
    agent_id: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    verifier_outcome: str | None = None  # "pass" (reward > 0) or "fail"
    # Rollouts where a verifier label newer than the human decision judges otherwise (runs.labels), whether
    # or not their reviews are complete: the queue then offers them to every reviewer, to decide again.
    disagreement: bool = False
    # Rollouts of runs of this purpose (runs.models.RunPurpose); None for every purpose. Evaluations unless
    # asked otherwise, so sessions and audits wait a filter away; a named run is shown whatever its purpose.
    # (An audit's probe and determinism rollouts never wait at all: runs/sql/review_state.sql.)
    purpose: str | None = RunPurpose.EVALUATION


def _rollout_labels():
    return RewardLabel.objects.filter(rollout=OuterRef("pk"), step__isnull=True)


def rollouts_matching(*, team, filters: QueueFilters | None = None):
    """The team's rollouts narrowed by the filters (annotated with `proposed_reward`), in id order."""
    # The verifier's latest proposal, as the review state a trigger keeps (ReviewState) has it.
    rollouts = Rollout.objects.filter(team=team).annotate(proposed_reward=F("review_state__proposed_reward"))
    return _filtered(rollouts, filters or QueueFilters(), rollout="").order_by("id")


def _filtered(queryset, filters: QueueFilters, *, rollout: str):
    """`queryset` narrowed by the filters; `rollout` is the lookup path to the rollout ("" for rollouts,
    "rollout__" for review states); both have the verifier's proposal as `proposed_reward`."""
    if filters.run_id is not None:
        queryset = queryset.filter(**{f"{rollout}run_id": filters.run_id})
    elif filters.purpose:
        # Review states carry their run's purpose (review_state_open_purpose indexes the open ones by it).
        queryset = queryset.filter(**{"purpose" if rollout else "run__purpose": filters.purpose})
    if filters.agent_id is not None:
        queryset = queryset.filter(**{f"{rollout}run__agent_id": filters.agent_id})
    if filters.environment:
        queryset = queryset.filter(**{f"{rollout}run__environment_version__environment__slug": filters.environment})
    if filters.version is not None:
        queryset = queryset.filter(**{f"{rollout}run__environment_version__number": filters.version})
    if filters.min_reward is not None:
        queryset = queryset.filter(proposed_reward__gte=filters.min_reward)
    if filters.max_reward is not None:
        queryset = queryset.filter(proposed_reward__lte=filters.max_reward)
    if filters.verifier_outcome == "pass":
        queryset = queryset.filter(proposed_reward__gt=0)
    elif filters.verifier_outcome == "fail":
        queryset = queryset.filter(proposed_reward__lte=0)
    if filters.disagreement:
        queryset = queryset.filter(**{"disagreement" if rollout else "review_state__disagreement": True})
    return queryset


def _queue_states(*, team, reviewer, filters: QueueFilters | None = None):
    """The review states of the rollouts that wait for `reviewer` (see review_queue), in rollout id order:
    read from the partial index of the team's open states, which carries who decided each, and joined to
    rollouts and runs only for the filters that need them. Readers narrow it to the reviewer's cursor
    (`_queue_ids`), so the ones the reviewer decided that still wait for others are not walked again.
    With the disagreement filter: the team's states in disagreement, from their own partial index, decided
    or not (deciding again after the newer verifier label ends the disagreement), with no cursor."""
    filters = filters or QueueFilters()
    if filters.disagreement:
        return _filtered(ReviewState.objects.filter(team=team), filters, rollout="rollout__").order_by("rollout_id")
    states = _filtered(ReviewState.objects.filter(team=team, open=True), filters, rollout="rollout__")
    return states.exclude(decider_ids__contains=[reviewer.pk]).order_by("rollout_id")


CURSOR_HOLES = 100  # a cursor keeps at most this many holes
CURSOR_LOCK = 0x7EA2  # pg_advisory_xact_lock(class, team id); runs/sql/review_state.sql takes it shared


_CURSOR_UPSERT = f"""
INSERT INTO {ReviewCursor._meta.db_table} AS c (team_id, reviewer_id, below, holes) VALUES (%s, %s, %s, %s::bigint[])
ON CONFLICT (team_id, reviewer_id) DO UPDATE SET below = EXCLUDED.below, holes = EXCLUDED.holes
WHERE (c.below, c.holes) IS DISTINCT FROM (EXCLUDED.below, EXCLUDED.holes)
"""


def queue_cursor(*, team, reviewer) -> tuple[int, list[int]]:
    """The reviewer's cursor (ReviewCursor: `below` and `holes`), moved past what they decided since.

    Under the team's exclusive advisory lock: a rollout that opens meanwhile waits for the move to commit,
    then joins the holes of the cursors past it (runs/sql/review_state.sql), so a move never skips an opening it could
    not see. The move keeps the holes that still wait for the reviewer, then takes the next undecided open
    states from `below` on as holes up to CURSOR_HOLES; `below` stops at the first one that does not fit
    (or past the last open state). Each decided state is passed over by one move, not by every read.
    A fixed number of statements; the row is rewritten only when it changed."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CURSOR_LOCK, team.pk])
        below, holes = ReviewCursor.objects.filter(team=team, reviewer=reviewer).values_list("below", "holes").first() or (0, [])
        undecided = ReviewState.objects.filter(team=team, open=True).exclude(decider_ids__contains=[reviewer.pk])
        # `holes or [-1]`: the same query whether or not there are holes (no id is negative).
        waiting = list(undecided.filter(rollout_id__in=holes or [-1]).order_by("rollout_id").values_list("rollout_id", flat=True))
        room = max(0, CURSOR_HOLES - len(waiting))
        following = list(undecided.filter(rollout_id__gte=below).order_by("rollout_id").values_list("rollout_id", flat=True)[: room + 1])
        last = ReviewState.objects.filter(team=team, open=True).order_by("-rollout_id").values_list("rollout_id", flat=True).first()
        moved = following[room] if len(following) > room else max(below, (last or 0) + 1)
        waiting += following[:room]
        if len(waiting) > CURSOR_HOLES:  # holes that opened behind the cursor: the rest are read again from `below`
            moved, waiting = min(moved, waiting[CURSOR_HOLES]), waiting[:CURSOR_HOLES]
        with connection.cursor() as cursor:  # one statement, whatever changed; no new row version when nothing did
            cursor.execute(_CURSOR_UPSERT, [team.pk, reviewer.pk, moved, waiting])
    return moved, waiting


def _at_cursor(states, below: int, holes: list[int]):
    return states.filter(Q(rollout_id__gte=below) | Q(rollout_id__in=holes or [-1]))


def _queue_ids(*, team, reviewer, filters: QueueFilters | None, after: int | None = None, n: int,
               cursor: tuple[int, list[int]] | None = None) -> list[int]:
    """The first `n` rollout ids of the queue (after `after`), from the reviewer's cursor (moved now unless
    given): its holes and the open states from `below` on, each part read through the index, merged.
    The disagreement filter reads its own index, with no cursor."""
    states = _queue_states(team=team, reviewer=reviewer, filters=filters)
    if after is not None:
        states = states.filter(rollout_id__gt=after)
    ids = lambda qs: qs.values_list("rollout_id", flat=True)  # noqa: E731
    if filters is not None and filters.disagreement:
        return list(ids(states)[:n])
    below, holes = cursor or queue_cursor(team=team, reviewer=reviewer)
    far = ids(states.filter(rollout_id__gte=below))[:n]
    near = ids(states.filter(rollout_id__in=holes or [-1]))[:n]
    return sorted(near.union(far, all=True))[:n]


def review_queue(*, team, reviewer, filters: QueueFilters | None = None):
    """Rollouts of the team that still wait for `reviewer`'s decision, oldest first (by id).

    A rollout waits while it has a verifier proposal and fewer distinct human reviewers than its
    run's `reviews_required` (K); a reviewer who already decided it no longer sees it. Both facts are
    the rollout's review state (ReviewState, kept by a trigger as labels arrive), read through a partial
    index of the open ones, from the reviewer's cursor on. Pages and the API read a page of it with
    review_queue_page, which costs that page however long the queue is and however much of it the
    reviewer decided; this queryset is for walking it (bulk decisions).
    """
    states = _queue_states(team=team, reviewer=reviewer, filters=filters)
    if not (filters is not None and filters.disagreement):
        states = _at_cursor(states, *queue_cursor(team=team, reviewer=reviewer))
    return _queue_rollouts(Rollout.objects.filter(team=team, pk__in=states.values("rollout_id"))).order_by("id")


def _queue_rollouts(rollouts):
    rollouts = rollouts.annotate(proposed_reward=F("review_state__proposed_reward"), human_deciders=F("review_state__deciders"),
                                 in_disagreement=F("review_state__disagreement"))
    return without_version_content(rollouts.select_related("run__environment_version__environment", "run__agent"),
                                   "run__environment_version")


def review_queue_page(*, team, reviewer, filters: QueueFilters | None = None, after: int | None = None,
                      offset: int = 0, limit: int = 100, cursor: tuple[int, list[int]] | None = None) -> list[Rollout]:
    """Up to `limit` rollouts of the queue, in queue order, after rollout id `after` (keyset) and/or
    skipping `offset`; each with `proposed_reward` and `human_deciders`. `cursor`: the reviewer's cursor
    when the caller moved it already (queue_cursor)."""
    # offset + limit stays a bigint (a LIMIT past it is refused by PostgreSQL): no queue is that long anyway.
    n = min(offset + limit, 2**63 - 1)
    ids = _queue_ids(team=team, reviewer=reviewer, filters=filters, after=after, n=n, cursor=cursor)
    return _rollouts_in_order(ids[offset:])


def review_queue_head(*, team, reviewer, filters: QueueFilters | None = None, limit: int = 100,
                      most: int = 1000) -> tuple[list[Rollout], int]:
    """The first `limit` rollouts of the queue and how many wait, counted up to `most` + 1 ("more than
    `most`"), from one read."""
    ids = _queue_ids(team=team, reviewer=reviewer, filters=filters, n=max(limit, most + 1))
    return _rollouts_in_order(ids[:limit]), len(ids)


def _rollouts_in_order(ids: list[int]) -> list[Rollout]:
    if not ids:
        return []
    found = {r.pk: r for r in _queue_rollouts(Rollout.objects.filter(pk__in=ids))}
    return [found[i] for i in ids if i in found]


def review_queue_count(*, team, reviewer, filters: QueueFilters | None = None, most: int | None = None) -> int:
    """How many rollouts wait for `reviewer` (at most `most` + 1 counted, when given: "more than `most`")."""
    if most is not None:
        return len(_queue_ids(team=team, reviewer=reviewer, filters=filters, n=most + 1))
    # An exact count reads every open state anyway: one index-only count, no cursor.
    return _queue_states(team=team, reviewer=reviewer, filters=filters).count()


def next_in_queue(*, team, reviewer, after_rollout_id: int | None = None, filters: QueueFilters | None = None):
    """The item after `after_rollout_id` in queue order, wrapping to the start for skipped ones; None when done."""
    disagreement = filters is not None and filters.disagreement
    cursor = None if disagreement else queue_cursor(team=team, reviewer=reviewer)  # moved once for both reads
    if after_rollout_id is not None:
        following = review_queue_page(team=team, reviewer=reviewer, filters=filters, after=after_rollout_id, limit=1,
                                      cursor=cursor)
        if following:
            return following[0]
    first = [r for r in review_queue_page(team=team, reviewer=reviewer, filters=filters, limit=2, cursor=cursor)
             if r.pk != after_rollout_id]
    return first[0] if first else None


def label_history(rollout):
    """Every label of the rollout and its steps, oldest first: the audit trail (who, when, what, why)."""
    return RewardLabel.objects.filter(rollout=rollout).select_related("reviewer", "step").order_by("created_at", "id")


def _review_roles() -> list[str]:
    return [role for role, permissions in ROLE_PERMISSIONS.items() if "review" in permissions]


def rollouts_owed_by(*, viewer, rollouts=None):
    """The rollouts (of `rollouts`, a queryset; default all) on which `viewer` still owes one of the K
    independent reviews: a member who may review, has not decided it, and fewer than K humans have.

    Blind review rests on this one definition: until the viewer decides, no read path (label history,
    pages, exports, agreement figures) shows them another human's decision or rationale."""
    rollouts = Rollout.objects.all() if rollouts is None else rollouts
    if viewer is None or not getattr(viewer, "pk", None):
        return rollouts.none()
    teams = Membership.objects.filter(user=viewer, role__in=_review_roles()).values("team_id")
    return (
        rollouts.filter(team_id__in=teams)
        .annotate(human_deciders_for_blind=Coalesce(F("review_state__deciders"), Value(0)))
        .filter(human_deciders_for_blind__lt=Greatest(F("run__reviews_required"), Value(1)))
        .exclude(Exists(_rollout_labels().filter(source=LabelSource.HUMAN, reviewer=viewer)))
    )


def review_open_for(rollout, viewer) -> bool:
    """Whether `viewer` may still decide this rollout as one of its K independent reviews."""
    return rollouts_owed_by(viewer=viewer, rollouts=Rollout.objects.filter(pk=rollout.pk)).exists()


def label_visible_to(label: RewardLabel, viewer) -> bool:
    """Within a rollout the viewer owes a review: the verifier's labels and the viewer's own."""
    return label.source == LabelSource.VERIFIER or (viewer is not None and label.reviewer_id == viewer.pk)


def visible_labels(rollout, viewer) -> list[RewardLabel]:
    """The history as `viewer` may see it: a reviewer who still owes an independent review sees
    the verifier's labels only, so others' decisions cannot sway theirs."""
    labels = list(label_history(rollout))
    if review_open_for(rollout, viewer):
        return [label for label in labels if label_visible_to(label, viewer)]
    return labels


def annotations_for(*, rollout=None, version=None, run=None, tag: str | None = None):
    """Annotations of one rollout, or of every rollout of a version or run, oldest first."""
    annotations = Annotation.objects.select_related("author", "step")
    if rollout is not None:
        annotations = annotations.filter(rollout=rollout)
    if run is not None:
        annotations = annotations.filter(rollout__run=run)
    if version is not None:
        annotations = annotations.filter(rollout__run__environment_version=version)
    if tag:
        annotations = annotations.filter(tags__contains=[tag])
    return annotations.order_by("created_at", "id")


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters on pass/fail; None when chance agreement is total (undefined)."""
    count = lambda a, b: sum(1 for pair in pairs if pair == (a, b))  # noqa: E731
    return kappa_of_counts(count(True, True), count(True, False), count(False, True), count(False, False))


def kappa_of_counts(tt: int, tf: int, ft: int, ff: int) -> float | None:
    """Cohen's kappa from a 2x2 table: tt = both pass, tf = first passes and second fails, and so on."""
    n = tt + tf + ft + ff
    if not n:
        return None
    observed = (tt + ff) / n
    a_pass, b_pass = (tt + tf) / n, (tt + ft) / n
    expected = a_pass * b_pass + (1 - a_pass) * (1 - b_pass)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def _round(x):
    return None if x is None else round(x, 4)


_AGREEMENT_SQL = """
SELECT coalesce(sum(reviewed), 0), coalesce(sum(approved), 0), coalesce(sum(rejected), 0), coalesce(sum(overridden), 0),
    coalesce(sum(decisions), 0), coalesce(sum(tt), 0), coalesce(sum(tf), 0), coalesce(sum(ft), 0), coalesce(sum(ff), 0),
    coalesce(sum(multi), 0), coalesce(sum(pairs), 0), coalesce(sum(agreeing), 0), coalesce(sum(disagreements), 0),
    (SELECT coalesce(sum(total), 0) FROM runs_runtally WHERE run_id IN ({runs}))
FROM runs_agreementtally WHERE rollout_id IS NULL AND run_id IN ({runs})
"""
# Per verifier version (VerifierTally, runs/sql/agreement_tally.sql): the run's own first, then by version number.
_BY_VERIFIER_SQL = """
SELECT v.id, e.slug || '@' || v.number, bool_or(v.id = u.environment_version_id), sum(t.labelled), sum(t.compared),
    sum(t.agreeing), sum(t.disagreements)
FROM runs_verifiertally t JOIN runs_run u ON u.id = t.run_id
    JOIN environments_environmentversion v ON v.id = t.verifier_version_id JOIN environments_environment e ON e.id = v.environment_id
WHERE t.rollout_id IS NULL AND t.run_id IN ({runs})
GROUP BY v.id, e.slug, v.number HAVING sum(t.labelled) > 0 ORDER BY bool_or(v.id = u.environment_version_id) DESC, v.number
"""
_AGREEMENT_TAGS_SQL = """
SELECT tag, count(*) FROM runs_annotation a JOIN runs_rollout r ON r.id = a.rollout_id, unnest(a.tags) AS tag
WHERE r.run_id IN ({runs}) GROUP BY tag
"""


# What blind review hides from a viewer (BlindTally, runs/sql/blind_tally.sql): over the rollouts whose review is under
# way, all of them less the ones the viewer decided, in the runs of teams where the viewer may review.
_BLIND_FIELDS = tuple(f.name for f in AgreementCounts._meta.fields)  # the counters both tallies keep
_BLIND_SQL = """
WITH b AS (
    SELECT * FROM runs_blindtally WHERE (reviewer_id IS NULL OR reviewer_id = %s) AND run_id IN (
        SELECT id FROM runs_run WHERE id IN ({runs})
        AND team_id IN (SELECT team_id FROM studio_membership WHERE user_id = %s AND role = ANY(%s)))
)
SELECT """ + ", ".join(
    f"coalesce(sum({f}) FILTER (WHERE reviewer_id IS NULL), 0) - coalesce(sum({f}) FILTER (WHERE reviewer_id IS NOT NULL), 0)"
    for f in _BLIND_FIELDS
) + " FROM b"


# The same for the per-version figures (VerifierBlindTally), by verifier version id.
_VERIFIER_BLIND_SQL = """
SELECT verifier_version_id, """ + ", ".join(
    f"coalesce(sum({f}) FILTER (WHERE reviewer_id IS NULL), 0) - coalesce(sum({f}) FILTER (WHERE reviewer_id IS NOT NULL), 0)"
    for f in ("compared", "agreeing", "disagreements")
) + """ FROM runs_verifierblindtally WHERE (reviewer_id IS NULL OR reviewer_id = %s) AND run_id IN (
    SELECT id FROM runs_run WHERE id IN ({runs})
    AND team_id IN (SELECT team_id FROM studio_membership WHERE user_id = %s AND role = ANY(%s)))
GROUP BY verifier_version_id
"""


def agreement(*, version=None, run=None, viewer=None) -> dict:
    """Agreement figures on pass/fail (pass = reward > 0) over the rollouts of a version or a run.

    Each human reviewer's latest rollout-level decision is one rating; the verifier's is its proposal (the
    newest label of the run's own verifier, runs.labels). `disagreements` counts the rollouts where a newer
    verifier label judges otherwise than the human decision; `by_verifier` compares each verifier version that
    labelled them (the run's own and any re-verification's) with the human decisions (VerifierTally).
    Read from the tallies a database trigger keeps as labels are added (AgreementTally, runs/sql/agreement_tally.sql):
    a fixed number of rows per run, however many rollouts and labels it has. With a `viewer`, human
    decisions on rollouts they still owe a review are left out (blind review, rollouts_owed_by's rule):
    what those rollouts contribute is taken back out, read from BlindTally (runs/sql/blind_tally.sql), again a
    fixed number of rows however many rollouts the viewer owes.
    """

    if (version is None) == (run is None):
        raise ValueError("agreement() takes a version or a run")
    if run is not None:
        runs, param = "%s", run.pk
    else:
        runs, param = "SELECT id FROM runs_run WHERE environment_version_id = %s", version.pk
    with connection.cursor() as cursor:
        cursor.execute(_AGREEMENT_SQL.format(runs=runs), [param, param])
        (reviewed, approved, rejected, overridden, human_decisions, tt, tf, ft, ff,
         rollouts_multi, human_pairs, agreeing_human_pairs, disagreements, rollouts) = (int(x) for x in cursor.fetchone())
        cursor.execute(_AGREEMENT_TAGS_SQL.format(runs=runs), [param])
        tags = dict(cursor.fetchall())
        cursor.execute(_BY_VERIFIER_SQL.format(runs=runs), [param])
        by_verifier = cursor.fetchall()
    hidden_by_verifier = {}
    if viewer is not None and getattr(viewer, "pk", None):
        with connection.cursor() as cursor:
            cursor.execute(_BLIND_SQL.replace("{runs}", runs), [viewer.pk, param, viewer.pk, _review_roles()])
            hidden = dict(zip(_BLIND_FIELDS, (int(x) for x in cursor.fetchone())))
        reviewed -= hidden["reviewed"]
        tt, tf, ft, ff = tt - hidden["tt"], tf - hidden["tf"], ft - hidden["ft"], ff - hidden["ff"]
        rollouts_multi -= hidden["multi"]
        human_pairs -= hidden["pairs"]
        agreeing_human_pairs -= hidden["agreeing"]
        human_decisions -= hidden["decisions"]
        approved -= hidden["approved"]
        rejected -= hidden["rejected"]
        overridden -= hidden["overridden"]
        disagreements -= hidden["disagreements"]
        with connection.cursor() as cursor:
            cursor.execute(_VERIFIER_BLIND_SQL.replace("{runs}", runs), [viewer.pk, param, viewer.pk, _review_roles()])
            hidden_by_verifier = {row[0]: tuple(int(x) for x in row[1:]) for row in cursor.fetchall()}
    changed = overridden + rejected
    override_rate = changed / human_decisions if human_decisions else None
    compared = tt + tf + ft + ff
    return {
        "rollouts": rollouts,
        "rollouts_reviewed": reviewed,
        "human_decisions": human_decisions,
        "approved": approved,
        "rejected": rejected,
        "overridden": overridden,
        "override_rate": _round(override_rate),
        "verifier_human": {
            "compared": compared,
            # Confusion matrix of the verifier's verdict (rows) against each human rating (columns).
            "confusion": {
                "verifier_pass_human_pass": tt, "verifier_pass_human_fail": tf,
                "verifier_fail_human_pass": ft, "verifier_fail_human_fail": ff,
            },
            "agreement_rate": _round((tt + ff) / compared) if compared else None,
            "kappa": _round(kappa_of_counts(tt, tf, ft, ff)),
        },
        "human_human": {
            "rollouts": rollouts_multi,
            "pairs": human_pairs,
            "agreement_rate": _round(agreeing_human_pairs / human_pairs) if human_pairs else None,
        },
        "tags": dict(sorted(tags.items(), key=lambda item: (-item[1], item[0]))),
        "verifier_often_overridden": bool(
            human_decisions >= FLAG_MIN_DECISIONS and override_rate is not None and override_rate >= FLAG_OVERRIDE_RATE
        ),
        "disagreements": disagreements,
        "by_verifier": [_verifier_row(row, hidden_by_verifier.get(row[0], (0, 0, 0))) for row in by_verifier],
    }


def _verifier_row(row, hidden) -> dict:
    _, label, own, labelled, compared, agreeing, disagreements = row
    compared, agreeing, disagreements = (int(x) - h for x, h in zip((compared, agreeing, disagreements), hidden))
    return {"version": label, "own": own, "labelled": int(labelled), "compared": compared, "agreeing": agreeing,
            "agreement_rate": _round(agreeing / compared) if compared else None, "disagreements": disagreements}
