"""Commit-time entrypoint checks run package code in a sandbox: on the studio's fixed deadline (not the
package's own limits, which may allow an hour), and at most ENTRYPOINT_CHECKS_PER_TEAM at once per team."""
import time

import psycopg
import pytest
from django.db import connection

from environments import services as env_services
from environments.dependencies import plugins
from environments.dependencies.services import CHECK_LOCK_SPACE
from tests.environments.depenv_support import commit, package_files
from tests.processes import database_url

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_PLUGIN = """
import time

import gymnasium

time.sleep(600)  # an import that never ends
gymnasium.register("Slow-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
"""


def slow_package():
    files = package_files(entrypoint="gymnasium:slowplugin:Slow-v0", name="slow")
    files["environment.toml"] = files["environment.toml"].replace("episode_timeout_s = 120", "episode_timeout_s = 3600\nload_timeout_s = 3600")
    files["slowplugin.py"] = SLOW_PLUGIN
    return files


def test_a_check_whose_import_never_ends_is_refused_on_the_studios_deadline(team, owner, monkeypatch):
    monkeypatch.setattr(plugins, "CHECK_DEADLINE_S", 3.0)  # the reset (where Gymnasium imports it) gets 1 s, not 3,600
    started = time.monotonic()
    with pytest.raises(env_services.InvalidVersion) as refused:
        commit(team, owner, "slow", slow_package())
    assert time.monotonic() - started < 30
    assert "entrypoint gymnasium:slowplugin:Slow-v0" in str(refused.value)
    assert "did not answer within 1.0 s" in str(refused.value)


def test_a_team_runs_at_most_its_cap_of_checks_at_once(team, owner, other_team, outsider, settings):
    settings.ENTRYPOINT_CHECKS_PER_TEAM = 2
    # Two checks of the team are running (in another web process: its advisory locks are held).
    holder = psycopg.connect(database_url(), autocommit=True)
    try:
        for slot in range(2):
            holder.execute("SELECT pg_advisory_lock(%s, %s)", [CHECK_LOCK_SPACE + slot, team.pk])
        files = package_files(entrypoint="gymnasium:cartplug:Cart-v0", name="cart")
        files["cartplug.py"] = 'import gymnasium\ngymnasium.register("Cart-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")\n'
        with pytest.raises(env_services.DomainError) as refused:
            commit(team, owner, "cart", files)
        assert refused.value.status == 429 and "ENTRYPOINT_CHECKS_PER_TEAM" in refused.value.message
        # Another team is not held back; once a check ends, the team's next one runs.
        assert commit(other_team, outsider, "cart", files)
        holder.execute("SELECT pg_advisory_unlock(%s, %s)", [CHECK_LOCK_SPACE, team.pk])
        assert commit(team, owner, "cart-again", files)
    finally:
        holder.close()
    with connection.cursor() as cursor:  # the web process let go of its slot
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert cursor.fetchone()[0] == 0
