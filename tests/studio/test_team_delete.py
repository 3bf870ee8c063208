"""Deleting a team (from the admin) removes everything it owns, runs included."""
from runs import services
from runs.models import Rollout
from studio.models import Team
from tests.runs.rollout_factories import demo_version


def test_team_with_runs_can_be_deleted_and_versions_in_use_cannot(team, owner, other_team, outsider):
    import pytest
    from django.db.models import RestrictedError

    version = demo_version(team, owner, "guess_number")
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1"], seeds=[0])
    with pytest.raises(RestrictedError):
        version.environment.delete()  # a version with runs cannot go on its own
    other = demo_version(other_team, outsider, "guess_number")
    team.delete()
    assert not Rollout.objects.filter(team_id=team.pk).exists()
    assert Team.objects.filter(pk=other_team.pk).exists() and other.environment.versions.count() == 1
