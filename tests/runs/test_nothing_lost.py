"""Nothing lost at the end of an episode: a verifier reason with a NUL character is stored (marked) and
the rollout ends; a non-finite reward is refused with a reason, never stored as 0.0."""
import pytest

from runs.models import RewardLabel, RolloutStatus
from tests.processes import celery_queue, celery_worker  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, play_one, random_agent

pytestmark = pytest.mark.django_db(transaction=True)


def env_with(step_reward: str, verify: str) -> str:
    return f"""
class Env:
    action_space = {{"type": "discrete", "n": 2}}

    def reset(self, task, seed):
        return {{"text": "start"}}

    def step(self, action):
        return {{"text": "done\\x00here"}}, {step_reward}, True, False, {{}}

    def verify(self):
        return {verify}
"""


def test_a_nul_in_the_verifier_reason_never_leaves_the_rollout_running(team, owner):
    version = package_version(team, owner, "nul-reason", env_with("1.0", '1.0, "all good\\x00 really"'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.verifier_reward == 1.0
    assert "\x00" not in rollout.verifier_reason and "all good" in rollout.verifier_reason
    assert "NUL" in rollout.verifier_reason  # says that it was changed
    label = RewardLabel.objects.get(rollout=rollout)
    assert label.value == 1.0 and "\x00" not in label.rationale


@pytest.mark.parametrize("reward", ['float("nan")', 'float("inf")', '-float("inf")'])
def test_a_non_finite_step_reward_is_refused_with_a_reason(team, owner, reward):
    version = package_version(team, owner, "nan-step", env_with(reward, '1.0, "ok"'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert "finite" in rollout.error
    assert not rollout.steps.filter(reward=0.0).exists()


@pytest.mark.parametrize("reward", ['float("nan")', 'float("inf")'])
def test_a_non_finite_verifier_reward_is_refused_with_a_reason(team, owner, reward):
    version = package_version(team, owner, "nan-verify", env_with("1.0", f'{reward}, "hm"'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.verifier_reward is None
    assert "finite" in rollout.error or "Out of range" in rollout.error or "JSON" in rollout.error
    assert not RewardLabel.objects.filter(rollout=rollout).exists()


# -- queued rollouts after the broker lost its queue -------------------------------------------------


def test_queued_rollouts_the_broker_lost_are_enqueued_again_once(team, owner, celery_queue):
    import redis
    from django.conf import settings
    from django.utils import timezone

    from runs import services
    from runs.episodes import worker
    from runs.models import Rollout
    from runs.tasks import rollouts_in_broker
    from tests.processes import forget_queue

    version = package_version(team, owner, "lost-queue", env_with("1.0", '1.0, "ok"'))
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1, 2])
    ids = sorted(run.rollouts.values_list("pk", flat=True))
    assert rollouts_in_broker() >= set(ids)
    assert worker.requeue_lost_rollouts(in_broker=rollouts_in_broker, grace_s=0) == []  # all still there

    forget_queue(celery_queue)  # Redis restarted empty
    Rollout.objects.filter(pk__in=ids).update(created_at=timezone.now() - timezone.timedelta(minutes=5))
    assert worker.requeue_lost_rollouts(in_broker=rollouts_in_broker) == ids
    assert worker.requeue_lost_rollouts(in_broker=rollouts_in_broker) == []  # never twice
    assert redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(celery_queue) == len(ids)


@pytest.mark.integration
def test_a_worker_starting_after_a_broker_loss_runs_the_queued_rollouts(team, owner, celery_queue, request):
    from django.utils import timezone

    from runs import services
    from runs.episodes import worker
    from runs.models import Rollout
    from tests.processes import forget_queue, wait_for

    version = package_version(team, owner, "lost-queue", env_with("1.0", '1.0, "ok"'))
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    forget_queue(celery_queue)
    Rollout.objects.filter(run=run).update(created_at=timezone.now() - timezone.timedelta(minutes=5))
    request.getfixturevalue("celery_worker")  # its start-up recovery finds them
    wait_for(lambda: not run.rollouts.exclude(status=RolloutStatus.SUCCEEDED).exists(), 90, "the lost rollouts to finish")
    assert sorted(run.rollouts.values_list("attempts", flat=True)) == [1, 1]


def test_a_finishing_write_the_database_refuses_still_ends_the_rollout(team, owner, monkeypatch):
    """Whatever the database says to the outcome's write, the rollout ends (errored, saying why) instead
    of staying `running` to be replayed."""
    from django.db import DataError

    from runs.episodes import service

    real_write, refused = service._rollout_finish_write, []

    def refusing_once(rollout, outcome):
        if not refused:
            refused.append(outcome.status)
            raise DataError("value out of range")
        return real_write(rollout, outcome)

    monkeypatch.setattr(service, "_rollout_finish_write", refusing_once)
    version = package_version(team, owner, "refused-outcome", env_with("1.0", '1.0, "ok"'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert refused == [RolloutStatus.SUCCEEDED]
    assert rollout.status == RolloutStatus.ERRORED
    assert "could not be stored" in rollout.error and "DataError" in rollout.error
    assert rollout.step_count == 1
    assert not RewardLabel.objects.filter(rollout=rollout).exists()
