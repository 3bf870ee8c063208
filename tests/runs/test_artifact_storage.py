"""Step artifacts on shared storage: what a worker writes through the storage API (a directory, or a
real S3-compatible server: moto's, over HTTP) is served by a web process only to the rollout's team.

Every test of the contract runs over both backends, configured as settings.py configures them from
the environment (`artifact_storage`)."""
import base64
import uuid

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import default_storage
from moto.server import ThreadedMotoServer

from runs import events, services
from runs.artifacts import ARTIFACT_KEY, artifact_store, artifact_url
from runs.episodes import StepWriter
from runs.models import Rollout, RolloutStatus, Step
from studio.settings import artifact_storage
from tests.conftest import api_for, login
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import demo_version, package_version, random_agent

SCREENSHOT = b"\xff\xd8\xff\xe0" + b"not really a JPEG, but bytes the studio must not alter " * 20
S3_KEYS = {"S3_ACCESS_KEY_ID": "studio-test", "S3_SECRET_ACCESS_KEY": "studio-test-secret", "S3_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-compatible server on a free loopback port, for the whole test session."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


class Bucket:
    """Reads an object straight from the S3 server, beside the studio's storage."""

    def __init__(self, endpoint: str, name: str):
        self.name = name
        self.client = boto3.client(
            "s3", endpoint_url=endpoint, region_name=S3_KEYS["S3_REGION"],
            aws_access_key_id=S3_KEYS["S3_ACCESS_KEY_ID"], aws_secret_access_key=S3_KEYS["S3_SECRET_ACCESS_KEY"],
        )
        self.client.create_bucket(Bucket=name)

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def keys(self) -> list[str]:
        return [item["Key"] for item in self.client.list_objects_v2(Bucket=self.name).get("Contents", [])]


@pytest.fixture(params=["filesystem", "s3"])
def backend(request, settings, monkeypatch, tmp_path):
    """The artifact storage configured from the environment, as at start; yields (kind, read(name) -> bytes)."""
    media = tmp_path / "media"
    settings.MEDIA_ROOT = str(media)
    monkeypatch.setenv("MEDIA_ROOT", str(media))  # for the processes a test starts
    monkeypatch.setenv("ARTIFACT_STORAGE", request.param)
    bucket = None
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = Bucket(endpoint, f"artifacts-{uuid.uuid4().hex[:12]}")
        for name, value in {**S3_KEYS, "S3_ENDPOINT_URL": endpoint, "S3_BUCKET": bucket.name}.items():
            monkeypatch.setenv(name, value)
    config = artifact_storage()
    settings.STORAGES = {**settings.STORAGES, "default": config, "artifacts": config}
    if bucket is not None:
        yield "s3", bucket.read
        assert not media.exists(), "the S3 backend wrote to the local disk"
    else:
        yield "filesystem", lambda name: (media / name).read_bytes()


@pytest.fixture
def running_rollout(team, owner):
    run = services.run_create(
        team=team, actor=owner, version=demo_version(team, owner, "guess_number"), agent=random_agent(team, owner),
        task_ids=["t1"], seeds=[0], enqueue=False,
    )
    rollout = run.rollouts.get()
    rollout.status, rollout.attempts = RolloutStatus.RUNNING, 1
    rollout.save(update_fields=["status", "attempts"])
    return rollout


def write_screenshot_step(rollout, index=0) -> dict:
    """One step with a screenshot, written by the worker's step writer; returns the published step."""
    writer = StepWriter(rollout)
    step = {
        "index": index, "action": {"action": "click"}, "observation": {"title": "Form"}, "reward": 0.0,
        "terminated": False, "truncated": False, "info": {}, "elapsed_ms": 5.0,
        ARTIFACT_KEY: {"type": "image/jpeg", "base64": base64.b64encode(SCREENSHOT).decode()},
    }
    writer.add(step)
    writer.flush()
    return step


def test_a_screenshot_the_worker_writes_is_in_the_storage_and_every_viewer_gets_the_served_url(
    backend, running_rollout, owner, team
):
    kind, read = backend
    published = write_screenshot_step(running_rollout)
    row = Step.objects.get(rollout=running_rollout, index=0)
    assert row.artifact.name == f"artifacts/rollouts/{running_rollout.pk}/00000.jpg"
    assert read(row.artifact.name) == SCREENSHOT

    url = f"/artifacts/rollouts/{running_rollout.pk}/00000.jpg"
    assert artifact_url(row.artifact.name) == url
    assert events.step_json(published, rollout_id=running_rollout.pk)["artifact_url"] == url  # live, over the websocket
    client = login(owner)
    replay = client.get(f"/t/{team.slug}/rollouts/{running_rollout.pk}/steps.json").json()
    assert replay["steps"][0]["artifact_url"] == url
    api_steps = api_for(owner, team).get(f"/rollouts/{running_rollout.pk}/steps").json()["steps"]
    assert api_steps[0]["artifact_url"] == url
    assert row.artifact.url == url  # FileField.url, and default_storage.url for the play page's first shot
    assert default_storage.url(row.artifact.name) == url


def test_members_get_the_artifact_from_the_storage_by_session_or_token(backend, running_rollout, owner, viewer, team):
    write_screenshot_step(running_rollout)
    url = f"/artifacts/rollouts/{running_rollout.pk}/00000.jpg"
    token = api_for(viewer, team)
    for response in (login(owner).get(url), login(viewer).get(url), token.client.get(url, headers=token.headers)):
        assert response.status_code == 200
        assert response["Content-Type"] == "image/jpeg" and response.content == SCREENSHOT
        assert "private" in response["Cache-Control"]


def test_another_teams_member_or_token_gets_a_404(backend, running_rollout, outsider, other_team):
    write_screenshot_step(running_rollout)
    url = f"/artifacts/rollouts/{running_rollout.pk}/00000.jpg"
    assert login(outsider).get(url).status_code == 404
    token = api_for(outsider, other_team)
    assert token.client.get(url, headers=token.headers).status_code == 404


def test_an_anonymous_visitor_is_sent_to_log_in_and_a_bad_token_is_refused(backend, running_rollout, client):
    write_screenshot_step(running_rollout)
    url = f"/artifacts/rollouts/{running_rollout.pk}/00000.jpg"
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
    refused = client.get(url, headers={"Authorization": "Bearer es_not-a-token"})
    assert refused.status_code == 401 and SCREENSHOT not in refused.content


def test_nothing_is_served_at_a_public_media_path(backend, running_rollout, owner):
    write_screenshot_step(running_rollout)
    name = Step.objects.get(rollout=running_rollout, index=0).artifact.name
    assert login(owner).get(f"/media/{name}").status_code == 404


def test_a_missing_or_odd_artifact_name_is_a_404(backend, running_rollout, owner):
    write_screenshot_step(running_rollout)
    client = login(owner)
    base = f"/artifacts/rollouts/{running_rollout.pk}"
    for path in (f"{base}/00001.jpg", f"{base}/..", f"{base}/.hidden.jpg", f"{base}/00000.txt", f"{base}/00000.jpg/x"):
        assert client.get(path).status_code == 404, path


def test_a_name_is_never_written_twice_so_a_replaced_worker_cannot_cover_a_screenshot(backend, running_rollout):
    kind, read = backend
    shot = {"type": "image/png", "base64": base64.b64encode(b"first").decode()}
    first = artifact_store(rollout_id=running_rollout.pk, index=3, artifact=shot)
    second = artifact_store(rollout_id=running_rollout.pk, index=3, artifact={**shot, "base64": base64.b64encode(b"second").decode()})
    assert first == f"artifacts/rollouts/{running_rollout.pk}/00003.png" and second != first
    assert (read(first), read(second)) == (b"first", b"second")
    assert artifact_url(second).startswith(f"/artifacts/rollouts/{running_rollout.pk}/00003_")


# A python environment that hands over a "screenshot" with each step, as browser environments do.
SHOOTING_ENV = """
import base64

class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.n, self.shot = 0, None
        return 0

    def step(self, action):
        self.n += 1
        self.shot = {"type": "image/png", "base64": base64.b64encode(b"PNG of step %d" % self.n).decode()}
        return self.n, 1.0, self.n >= 3, False, {}

    def take_artifact(self):
        shot, self.shot = self.shot, None
        return shot
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_what_a_worker_process_stores_this_web_process_serves_to_the_team_only(
    backend, celery_queue, celery_worker, team, owner, outsider
):
    kind, read = backend
    version = package_version(team, owner, "shooting", SHOOTING_ENV)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), task_ids=["t1"], seeds=[0])
    rollout = run.rollouts.get()
    wait_for(lambda: Rollout.objects.get(pk=rollout.pk).is_finished, 60, "the worker to finish the rollout")
    steps = list(Step.objects.filter(rollout=rollout).order_by("index"))
    assert [s.artifact.name for s in steps] == [f"artifacts/rollouts/{rollout.pk}/{i:05d}.png" for i in range(3)]
    member, stranger = login(owner), login(outsider)
    for i, step in enumerate(steps):
        assert read(step.artifact.name) == b"PNG of step %d" % (i + 1)
        served = member.get(step.artifact.url)
        assert served.status_code == 200 and served.content == b"PNG of step %d" % (i + 1)
        assert served["Content-Type"] == "image/png"
        assert stranger.get(step.artifact.url).status_code == 404


@pytest.mark.parametrize(
    "environ,message",
    [
        ({"ARTIFACT_STORAGE": "ftp"}, "ARTIFACT_STORAGE must be one of filesystem, s3"),
        ({"ARTIFACT_STORAGE": "s3"}, "needs S3_BUCKET"),
        ({"ARTIFACT_STORAGE": "s3", "S3_BUCKET": "b", "S3_ENDPOINT_URL": "minio:9000"}, r"S3_ENDPOINT_URL must be an http\(s\) URL"),
        ({"ARTIFACT_STORAGE": "s3", "S3_BUCKET": "b", "S3_ACCESS_KEY_ID": "k"}, "go together"),
    ],
)
def test_a_bad_storage_setting_stops_the_start(monkeypatch, environ, message):
    for name in ("S3_BUCKET", "S3_ENDPOINT_URL", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        artifact_storage()
