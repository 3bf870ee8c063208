"""Agreement figures: verifier vs human (rate, Cohen's kappa), human vs human, overrides, tags, flag."""
import pytest

from runs.review import selectors, services


def test_kappa_matches_a_hand_computed_example(make_run, reviewer, version):
    # verifier: P P P P P P F F F F;  human: P P P P F(rejected) F(override 0) F F F P(override 1)
    # observed agreement 7/10; chance = 0.6*0.5 + 0.4*0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    run = make_run([1.0] * 6 + [0.0] * 4)
    rollouts = list(run.rollouts.order_by("id"))
    decide = lambda r, d, v=None: services.label_decide(rollout=r, actor=reviewer, decision=d, value=v, rationale="x")  # noqa: E731
    for r in rollouts[:4]:
        decide(r, "approved")
    decide(rollouts[4], "rejected")
    decide(rollouts[5], "overridden", 0.0)
    for r in rollouts[6:9]:
        decide(r, "approved")
    decide(rollouts[9], "overridden", 1.0)
    figures = selectors.agreement(run=run)
    assert figures["verifier_human"] == {
        "compared": 10, "agreement_rate": 0.7, "kappa": 0.4,
        "confusion": {"verifier_pass_human_pass": 4, "verifier_pass_human_fail": 2,
                      "verifier_fail_human_pass": 1, "verifier_fail_human_fail": 3},
    }
    assert (figures["approved"], figures["rejected"], figures["overridden"]) == (7, 1, 2)
    assert figures["override_rate"] == 0.3
    assert figures["verifier_often_overridden"] is True
    assert selectors.agreement(version=version)["verifier_human"]["kappa"] == 0.4


def test_cohen_kappa_edge_cases():
    assert selectors.cohen_kappa([]) is None
    assert selectors.cohen_kappa([(True, True)] * 3) is None  # chance agreement is total: undefined
    assert selectors.cohen_kappa([(True, True), (False, False)]) == 1.0
    assert selectors.cohen_kappa([(True, False), (False, True)]) == -1.0


def test_human_vs_human_agreement_where_k_is_above_one(make_run, reviewer, owner):
    run = make_run([1.0, 1.0], reviews_required=2)
    first, second = run.rollouts.order_by("id")
    for user in (reviewer, owner):
        services.label_decide(rollout=first, actor=user, decision="approved")
    services.label_decide(rollout=second, actor=reviewer, decision="approved")
    services.label_decide(rollout=second, actor=owner, decision="rejected")
    figures = selectors.agreement(run=run)
    assert figures["human_human"] == {"rollouts": 2, "pairs": 2, "agreement_rate": 0.5}
    assert figures["verifier_human"]["compared"] == 4
    assert figures["verifier_often_overridden"] is False  # 4 decisions: too few to flag


def test_tags_are_counted_and_unreviewed_versions_read_empty(make_run, reviewer, version):
    run = make_run([1.0, 0.0])
    a, b = run.rollouts.order_by("id")
    services.annotation_add(rollout=a, actor=reviewer, text="", tags=["reward-hack", "env-bug"])
    services.annotation_add(rollout=b, actor=reviewer, text="", tags=["reward-hack"], step=b.steps.first())
    figures = selectors.agreement(version=version)
    assert figures["tags"] == {"reward-hack": 2, "env-bug": 1}
    assert figures["rollouts"] == 2 and figures["human_decisions"] == 0
    assert figures["verifier_human"]["compared"] == 0 and figures["verifier_human"]["kappa"] is None
    assert set(figures["verifier_human"]["confusion"].values()) == {0}


def test_agreement_needs_exactly_one_scope():
    with pytest.raises(ValueError):
        selectors.agreement()


def test_the_version_page_shows_the_confusion_matrix(make_run, reviewer, owner, team, version):
    from tests.conftest import login

    run = make_run([1.0, 1.0, 0.0])
    first, second, third = run.rollouts.order_by("id")
    services.label_decide(rollout=first, actor=reviewer, decision="approved")
    services.label_decide(rollout=second, actor=reviewer, decision="rejected", rationale="gamed")
    services.label_decide(rollout=third, actor=reviewer, decision="approved")
    page = login(owner).get(f"/t/{team.slug}/environments/{version.environment.slug}/versions/{version.number}/").content.decode()
    matrix = page[page.index('id="confusion"'):page.index("</table>", page.index('id="confusion"'))]
    cells = [cell.split(">")[-1] for cell in matrix.split("</td>")[:-1]]
    assert cells == ["1", "1", "0", "1"]

