"""A rollout page watched live across a Redis restart (issue 15): it says the live stream is lost while
Redis is down, reconnects when it is back, and ends equal to the same page reloaded."""
import pytest
from django.conf import settings as django_settings

from runs import events, services
from runs.models import Rollout, RolloutStatus
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.processes import kill_group, private_redis, start_asgi_server  # noqa: F401 - fixtures
from tests.runs.rollout_factories import IDLE_ENV_PY, package_version, random_agent
from tests.runs.test_stream_lost import store_and_publish

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# What a viewer reads on the replay: status, verdict, how many steps, the live note.
READ_REPLAY = """() => ({
  status: document.getElementById("replay-status").textContent.trim(),
  live: document.getElementById("replay-live").hidden,
  verdict: document.getElementById("replay-verdict").hidden,
  reward: document.getElementById("replay-verifier-reward").textContent.trim(),
  reason: document.getElementById("replay-verifier-reason").textContent.trim(),
  steps: window.studioReplay.state.count,
  last: document.getElementById("replay-scrubber").max,
  head: document.getElementById("rollout-head")?.innerText ?? null,
})"""


def test_the_replay_says_the_stream_is_lost_then_resyncs_to_what_a_reload_shows(page, tmp_path, settings, team, owner, private_redis):
    layer = dict(django_settings.CHANNEL_LAYERS["default"])
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {**layer["CONFIG"], "hosts": [private_redis.url]}}}
    version = package_version(team, owner, "page-stream-lost", IDLE_ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), enqueue=False)
    rollout = run.rollouts.get()
    store_and_publish(rollout, range(0, 5))
    web, url = start_asgi_server(tmp_path / "web.log", env={"REDIS_URL": private_redis.url})
    try:
        log_in(page, url, "olivia", PASSWORD)
        page.goto(f"{url}/t/{team.slug}/rollouts/{rollout.pk}/")
        page.wait_for_function("() => document.getElementById('replay-live').textContent.includes('● live') && !document.getElementById('replay-live').hidden")
        store_and_publish(rollout, range(5, 8))
        page.wait_for_function("() => window.studioReplay.state.count === 8")

        private_redis.kill()
        page.wait_for_function("() => document.getElementById('replay-live').textContent.includes('live stream lost')")
        assert page.locator("#replay-live").is_visible()
        store_and_publish(rollout, range(8, 20))
        Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.SUCCEEDED, verifier_reward=1.0, verifier_reason="all done")
        events.publish_rollout(Rollout.objects.get(pk=rollout.pk))
        private_redis.start()

        page.wait_for_function("() => document.getElementById('replay-status').textContent.trim() === 'succeeded'", timeout=30_000)
        page.wait_for_function("() => window.studioReplay.state.count === 20")
        # Watched to its end, the page re-reads its header, outcome and reproduction parts.
        page.wait_for_function("() => document.getElementById('rollout-head').innerText.includes('succeeded')")
        watched = page.evaluate(READ_REPLAY)
        page.reload()
        page.wait_for_selector("#replay.ready")
        reloaded = page.evaluate(READ_REPLAY)
    finally:
        kill_group(web)
    assert watched == reloaded
    assert watched["status"] == "succeeded" and watched["steps"] == 20 and watched["live"] is True
