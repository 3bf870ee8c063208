"""The environments list tells, per environment, its last run with its success rate and whether the
draft holds uncommitted changes."""
from environments import selectors, services
from environments.templatetags.package_text import cut_at_sentence
from runs import services as run_services
from runs.models import Rollout
from tests.conftest import login


def test_uncommitted_changes_show_until_committed(environment, owner, team):
    (card,) = selectors.environment_cards(team=team)
    assert card.uncommitted  # nothing committed yet
    services.version_commit(environment=environment, actor=owner, message="first")
    (card,) = selectors.environment_cards(team=team)
    assert not card.uncommitted
    environment.draft.refresh_from_db()
    services.draft_save_file(environment=environment, actor=owner, path="notes.md", content="hi", expected_revision=environment.draft.revision)
    (card,) = selectors.environment_cards(team=team)
    assert card.uncommitted
    assert "uncommitted changes" in login(owner).get(f"/t/{team.slug}/environments/").content.decode()


def test_the_last_run_and_its_success_rate_show_on_the_card(environment, owner, team):
    version = services.version_commit(environment=environment, actor=owner, message="first")
    agent = run_services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    run_services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0], enqueue=False)
    last = run_services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0, 1, 2, 3], enqueue=False)
    for rollout, status in zip(last.rollouts.order_by("id"), ["succeeded", "failed", "errored", "cancelled"]):
        Rollout.objects.filter(pk=rollout.pk).update(status=status)
    (card,) = selectors.environment_cards(team=team)
    assert card.last_run.pk == last.pk and (card.last_run.done, card.last_run.cancelled) == (3, 1)
    page = login(owner).get(f"/t/{team.slug}/environments/").content.decode()
    assert f"#{last.pk} queued" in page and "<strong>33%</strong> success" in page


def test_no_run_yet_says_so(environment, owner, team):
    assert "No runs yet" in login(owner).get(f"/t/{team.slug}/environments/").content.decode()


def test_a_markdown_description_reads_as_plain_words_on_the_card(environment, owner, team):
    services.environment_update(environment=environment, actor=owner, description=(
        "[MiniGrid](https://minigrid.farama.org/)'s `MiniGrid-Empty-5x5-v0`, **unchanged** <b>x</b>"))
    page = login(owner).get(f"/t/{team.slug}/environments/").content.decode()
    assert "MiniGrid&#x27;s MiniGrid-Empty-5x5-v0, unchanged &lt;b&gt;x&lt;/b&gt;" in page
    assert "farama.org" not in page and "`" not in page


def test_a_long_description_is_cut_after_a_whole_sentence_and_kept_whole_on_hover(environment, owner, team):
    first = "Sort a shuffled list of integers in as few swaps as you can."
    second = "Each swap exchanges two neighbours, and the episode ends when the list is sorted or 40 swaps pass."
    services.environment_update(environment=environment, actor=owner, description=f"{first} {second} A third one.")
    page = login(owner).get(f"/t/{team.slug}/environments/").content.decode()
    assert f">{first}</span>" in page  # the two sentences together pass 140 characters: only the first shows
    assert f'title="{first} {second} A third one."' in page


def test_a_first_sentence_longer_than_the_room_ends_at_a_word_with_an_ellipsis():
    text = "word " * 40
    cut = cut_at_sentence(text, 30)
    assert cut.endswith("word…") and len(cut) <= 30
    assert cut_at_sentence("Short. Fits.", 140) == "Short. Fits."
    assert cut_at_sentence("Version 1.5 adds levels. More text follows here.", 30) == "Version 1.5 adds levels."
