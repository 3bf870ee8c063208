"""Schemathesis over /api/v1/openapi.json against the real app (WSGI, real PostgreSQL): valid and invalid
requests for every operation, a bounded number each, and not one answered with a server error.

Deterministic (derandomized) so that CI sees the same requests each time; the examples per operation
are few enough to run in about a minute on two cores, split into SHARDS tests that xdist runs side by side."""
import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from runs import services as run_services
from runs.review import services as review_services
from tests.conftest import api_for
from tests.runs.rollout_factories import package_version, play_run, random_agent

EXAMPLES_PER_OPERATION = {GenerationMode.POSITIVE: 8, GenerationMode.NEGATIVE: 8}
SHARDS = 4  # every operation in exactly one shard: operation i goes to shard i % SHARDS
ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 1, 1.0, True, False, {}

    def verify(self):
        return 1.0, "done"
"""


@pytest.fixture
def populated(team, owner, reviewer):
    """Something behind the ids the fuzzer tries first (1, 2, ...): a version, a finished run, labels."""
    version = package_version(team, owner, "fuzz", ENV_PY, tasks=[{"id": "t1", "difficulty": 1}])
    run = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    rollouts = play_run(run)
    review_services.label_decide(rollout=rollouts[0], actor=reviewer, decision="approved", rationale="fine")
    return api_for(owner, team)


def operations():
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_api_operation_answers_with_a_server_error(populated, shard):
    token = populated.headers["Authorization"]
    failures = []
    checked = 0
    for operation in operations()[shard::SHARDS]:
        for mode, examples in EXAMPLES_PER_OPERATION.items():

            @settings(
                max_examples=examples, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def probe(case):
                nonlocal checked
                checked += 1
                response = case.call(headers={"Authorization": token})
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {case.as_curl_command()}")

            probe()
    assert checked > 200 // SHARDS
    assert not failures, f"{len(failures)} server errors:\n" + "\n".join(failures[:20])
