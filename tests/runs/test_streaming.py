"""Live streaming over websockets: who may follow a rollout or a run, and that a viewer gets every step
exactly once, in order, whenever it joins or rejoins. The worker is simulated by writing steps and
publishing them through `runs.events`, as the engine does (commit, then publish)."""
import sys
import threading
import time
import types
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from django.db import connection
from django.test import Client

from runs import backlog, events, services
from runs.fanout import rollout_fanout, run_fanout
from runs.models import Rollout, RolloutStatus, Step
from studio import services as studio_services
from studio.asgi import application
from studio.routing import websocket_urlpatterns
from studio.ws_auth import ProgramOriginValidator
from tests.runs.rollout_factories import IDLE_ENV_PY, package_version, random_agent

try:
    from channels.testing import WebsocketCommunicator
except ModuleNotFoundError:
    # channels.testing imports daphne for its live-server test case, which we do not use (the
    # project serves with uvicorn): give that import a placeholder rather than a dependency.
    sys.modules.setdefault("daphne", types.ModuleType("daphne"))
    sys.modules["daphne.testing"] = types.SimpleNamespace(DaphneProcess=None)
    from channels.testing import WebsocketCommunicator

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture(autouse=True)
def own_channel_layer(settings):
    """A channel-layer prefix of our own: other test sessions share this Redis and the same ids."""
    layer = dict(settings.CHANNEL_LAYERS["default"])
    layer["CONFIG"] = {**layer["CONFIG"], "prefix": f"test-stream-{uuid.uuid4().hex[:8]}"}
    settings.CHANNEL_LAYERS = {"default": layer}


@pytest.fixture
def run(team, owner):
    version = package_version(team, owner, "stream", IDLE_ENV_PY, tasks=[{"id": "t1"}, {"id": "t2"}])
    return services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), enqueue=False)


@pytest.fixture
def rollout(run):
    return run.rollouts.order_by("id").first()


def session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def step_row(index: int) -> dict:
    return {
        "index": index, "action": index % 4, "observation": {"n": index}, "reward": 1.0, "terminated": False,
        "truncated": False, "info": {"i": index}, "elapsed_ms": 0.5,
    }


def step_dict(index: int) -> dict:
    """A step as viewers receive it (no screenshot in these tests)."""
    return step_row(index) | {"artifact_url": None}


def write_and_publish(rollout: Rollout, indexes) -> None:
    """What the engine's StepWriter.flush does: store the batch, count it, then publish it."""
    steps = [step_row(i) for i in indexes]
    Step.objects.bulk_create([Step(rollout_id=rollout.pk, **s) for s in steps])
    Rollout.objects.filter(pk=rollout.pk).update(step_count=steps[-1]["index"] + 1, status=RolloutStatus.RUNNING)
    events.publish_steps(rollout, steps)


def set_status(rollout: Rollout, status: str) -> Rollout:
    Rollout.objects.filter(pk=rollout.pk).update(status=status)
    rollout.refresh_from_db()
    events.publish_rollout(rollout)
    return rollout


def communicator(path: str, *headers, app=application) -> WebsocketCommunicator:
    return WebsocketCommunicator(app, path, headers=[ORIGIN, *headers])


async def first_message(comm: WebsocketCommunicator) -> dict:
    """The first message after a successful handshake (then the viewer leaves)."""
    connected, _ = await comm.connect()
    assert connected
    message = await comm.receive_json_from(timeout=3)
    await comm.disconnect()
    return message


async def close_code(comm: WebsocketCommunicator):
    """The code the server closed with right after the handshake."""
    connected, _ = await comm.connect()
    if not connected:
        return "handshake refused"
    output = await comm.receive_output(timeout=3)
    await comm.disconnect()
    assert output["type"] == "websocket.close", output
    return output.get("code")


async def collect_steps(comm: WebsocketCommunicator, until_index: int, timeout: float = 10) -> tuple[list[int], list[dict]]:
    """Step indexes received (in arrival order) until `until_index` arrives, and the other messages."""
    indexes, others = [], []
    deadline = time.monotonic() + timeout
    while not indexes or indexes[-1] < until_index:
        message = await comm.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
        if message["type"] == "steps":
            indexes.extend(step["index"] for step in message["steps"])
        else:
            others.append(message)
    return indexes, others


# -- who may connect ---------------------------------------------------------------------------------

def test_unauthenticated_viewer_is_refused_with_4401(rollout):
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk}/")) == 4401


def test_a_session_whose_password_changed_since_is_refused_with_4401(rollout, owner):
    """Django's own session check: the session's auth hash no longer matches once the password changes."""
    cookie = session_cookie(owner)
    assert async_to_sync(first_message)(communicator(f"/ws/rollouts/{rollout.pk}/?backlog=0", cookie))["type"] == "status"
    owner.set_password("a-brand-new-password-9")
    owner.save()
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk}/", cookie)) == 4401


def test_member_of_another_team_is_refused_as_if_the_rollout_did_not_exist(rollout, run, outsider):
    cookie = session_cookie(outsider)
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk}/", cookie)) == 4404
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk + 1000}/", cookie)) == 4404
    assert async_to_sync(close_code)(communicator(f"/ws/runs/{run.pk}/", cookie)) == 4404


def test_other_teams_token_is_refused(rollout, outsider, other_team):
    _, raw = studio_services.token_create(team=other_team, actor=outsider, name="script")
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk}/?token={raw}")) == 4404


def test_token_in_query_or_header_follows_a_rollout_and_a_revoked_token_is_refused(rollout, team, owner):
    token, raw = studio_services.token_create(team=team, actor=owner, name="script")
    write_and_publish(rollout, range(3))

    for comm in (
        communicator(f"/ws/rollouts/{rollout.pk}/?token={raw}"),
        communicator(f"/ws/rollouts/{rollout.pk}/", (b"authorization", f"Bearer {raw}".encode())),
    ):
        message = async_to_sync(first_message)(comm)
        assert message == {"type": "steps", "rollout_id": rollout.pk, "steps": [step_dict(i) for i in range(3)]}

    studio_services.token_revoke(token=token, actor=owner)
    assert async_to_sync(close_code)(communicator(f"/ws/rollouts/{rollout.pk}/?token={raw}")) == 4401


def test_a_bad_token_does_not_fall_back_to_the_session(rollout, owner):
    path = f"/ws/rollouts/{rollout.pk}/?token=es_not-a-token"
    assert async_to_sync(close_code)(communicator(path, session_cookie(owner))) == 4401


def test_program_without_origin_header_connects_with_a_token_but_a_foreign_page_is_refused(rollout, team, owner):
    _, raw = studio_services.token_create(team=team, actor=owner, name="script")
    app = ProgramOriginValidator(URLRouter(websocket_urlpatterns))

    async def scenario():
        program = WebsocketCommunicator(app, f"/ws/rollouts/{rollout.pk}/?token={raw}")
        connected, _ = await program.connect()
        assert connected
        assert (await program.receive_json_from(timeout=3))["type"] == "status"
        await program.disconnect()
        foreign = WebsocketCommunicator(app, f"/ws/rollouts/{rollout.pk}/?token={raw}",
                                        headers=[(b"origin", b"http://evil.example")])
        connected, _ = await foreign.connect()
        assert not connected

    async_to_sync(scenario)()


# -- what a rollout viewer receives ---------------------------------------------------------------------

def test_viewer_gets_stored_steps_then_status_then_live_steps_and_status(rollout, owner):
    write_and_publish(rollout, range(0, 1200))  # more than one chunk (runs.backlog.FIRST_CHUNK, CHUNK)

    cookie = session_cookie(owner)

    async def scenario():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/", cookie)
        assert (await comm.connect())[0]
        sizes, indexes = [], []
        while len(indexes) < 1200:
            message = await comm.receive_json_from(timeout=3)
            assert message["type"] == "steps"
            sizes.append(len(message["steps"]))
            indexes.extend(s["index"] for s in message["steps"])
        status = await comm.receive_json_from(timeout=3)
        await async_to_sync_in_thread(write_and_publish, rollout, range(1200, 1210))
        live = await comm.receive_json_from(timeout=3)
        await async_to_sync_in_thread(set_status, rollout, RolloutStatus.SUCCEEDED)
        final = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        return sizes, indexes, status, live, final

    sizes, indexes, status, live, final = async_to_sync(scenario)()
    assert sizes == [100, 500, 500, 100] and indexes == list(range(1200))  # a small first chunk, then 500s
    assert status["type"] == "status" and status["status"] == "running" and status["step_count"] == 1200
    assert live == {"type": "steps", "rollout_id": rollout.pk, "steps": [step_dict(i) for i in range(1200, 1210)]}
    assert final["type"] == "status" and final["status"] == "succeeded" and final["rollout_id"] == rollout.pk


def test_late_join_racing_a_burst_gets_every_step_once_in_order(rollout, owner):
    cookie = session_cookie(owner)
    started = threading.Event()

    def worker():
        try:
            for batch_start in range(0, 500, 10):
                write_and_publish(rollout, range(batch_start, batch_start + 10))
                if batch_start == 100:
                    started.set()
                time.sleep(0.002)
        finally:
            connection.close()

    async def scenario():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/", cookie)
        thread = threading.Thread(target=worker)
        thread.start()
        while not started.is_set():
            await _sleep(0.001)
        assert (await comm.connect())[0]  # midway through the burst
        indexes, others = await collect_steps(comm, 499)
        thread.join()
        await comm.disconnect()
        return indexes, others

    indexes, others = async_to_sync(scenario)()
    assert indexes == list(range(500))
    assert [m["type"] for m in others] == ["status"]


@pytest.mark.parametrize("join_at", [20, 80, 140])
def test_join_racing_single_step_batches_has_no_gap_or_duplicate(rollout, owner, join_at):
    """Batches of one, no pause: the join lands between a commit and its publish as often as not."""
    cookie = session_cookie(owner)
    reached = threading.Event()

    def worker():
        try:
            for index in range(200):
                write_and_publish(rollout, [index])
                if index == join_at:
                    reached.set()
        finally:
            connection.close()

    async def scenario():
        thread = threading.Thread(target=worker)
        thread.start()
        while not reached.is_set():
            await _sleep(0.001)
        comm = communicator(f"/ws/rollouts/{rollout.pk}/", cookie)
        assert (await comm.connect())[0]
        indexes, _ = await collect_steps(comm, 199)
        thread.join()
        await comm.disconnect()
        return indexes

    assert async_to_sync(scenario)() == list(range(200))


def test_reconnect_with_after_resumes_from_the_next_step(rollout, owner):
    write_and_publish(rollout, range(50))

    cookie = session_cookie(owner)

    async def scenario():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/?after=29", cookie)
        assert (await comm.connect())[0]
        first = await comm.receive_json_from(timeout=3)
        status = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        return first, status

    first, status = async_to_sync(scenario)()
    assert [s["index"] for s in first["steps"]] == list(range(30, 50))
    assert status["type"] == "status" and status["step_count"] == 50


def test_a_missed_publish_is_filled_from_the_database(rollout, owner):
    """Steps stored but never published (a lost message) reach the viewer with the next live batch."""

    cookie = session_cookie(owner)

    async def scenario():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/", cookie)
        assert (await comm.connect())[0]
        assert (await comm.receive_json_from(timeout=3))["type"] == "status"
        await async_to_sync_in_thread(_store_silently, rollout, range(0, 5))
        await async_to_sync_in_thread(write_and_publish, rollout, range(5, 8))
        indexes, _ = await collect_steps(comm, 7)
        await comm.disconnect()
        return indexes

    assert async_to_sync(scenario)() == list(range(8))


def test_backlog_0_skips_stored_steps_and_forwards_only_live_ones(rollout, owner):
    write_and_publish(rollout, range(100))

    cookie = session_cookie(owner)

    async def scenario():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/?after=-1&backlog=0", cookie)
        assert (await comm.connect())[0]
        status = await comm.receive_json_from(timeout=3)
        await async_to_sync_in_thread(write_and_publish, rollout, range(100, 103))
        live = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        return status, live

    status, live = async_to_sync(scenario)()
    assert status["type"] == "status" and status["step_count"] == 100
    assert [s["index"] for s in live["steps"]] == [100, 101, 102]


@pytest.mark.parametrize("finished", [True, False])
def test_viewers_joining_together_share_one_read_of_the_backlog_and_it_is_let_go_when_they_leave(rollout, owner, monkeypatch, finished):
    """30 viewers open a stored 1,200-step rollout at once: each chunk is read from the database once,
    every viewer gets every step once in order; once they have left the process holds none of it."""
    write_and_publish(rollout, range(1200))
    if finished:
        set_status(rollout, RolloutStatus.SUCCEEDED)
    reads = []
    real_read = backlog.steps_after
    monkeypatch.setattr(backlog, "steps_after", lambda rollout_id, after, *a: reads.append(after) or real_read(rollout_id, after, *a))
    cookie = session_cookie(owner)

    async def one_viewer():
        comm = communicator(f"/ws/rollouts/{rollout.pk}/", cookie)
        assert (await comm.connect())[0]
        indexes, others = await collect_steps(comm, 1199)
        others.append(await comm.receive_json_from(timeout=5))
        return comm, indexes, others

    async def scenario():
        import asyncio

        viewers = await asyncio.gather(*(one_viewer() for _ in range(30)))
        held = backlog.open_backlogs(rollout.pk)  # this rollout's: another test's may linger in this worker process
        for comm, _, _ in viewers:
            await comm.disconnect()
        return [(indexes, others) for _, indexes, others in viewers], held, backlog.open_backlogs(rollout.pk)

    seen, held, left = async_to_sync(scenario)()
    assert all(indexes == list(range(1200)) for indexes, _ in seen)
    assert all([m["type"] for m in others] == ["status"] for _, others in seen)
    # Full chunks once; the last, short chunk (and the empty read after it) of a running rollout can
    # still grow, so it is shared only by viewers who ask while it is being read.
    assert reads.count(-1) == reads.count(99) == reads.count(599) == 1
    if finished:
        assert sorted(reads) == [-1, 99, 599, 1099]
    assert held == 1 and left == 0


def test_rollout_viewers_share_one_subscription_and_each_gets_live_steps_once(rollout, owner):
    """20 viewers of a running rollout are one member of its group in this process; a live batch reaches
    each of them once, after their stored steps; once they have left the process follows it no more."""
    write_and_publish(rollout, range(0, 3))
    cookie = session_cookie(owner)

    async def scenario():
        import asyncio

        comms = [communicator(f"/ws/rollouts/{rollout.pk}/", cookie) for _ in range(20)]
        for comm in comms:
            assert (await comm.connect())[0]
        stored = await asyncio.gather(*(collect_steps(comm, 2) for comm in comms))
        members = len(rollout_fanout().viewers[rollout.pk])
        await async_to_sync_in_thread(write_and_publish, rollout, range(3, 6))
        live = await asyncio.gather(*(collect_steps(comm, 5) for comm in comms))
        for comm in comms:
            await comm.disconnect()
        return stored, live, members, dict(rollout_fanout().viewers)

    stored, live, members, left = async_to_sync(scenario)()
    assert members == 20 and left == {}
    assert all(indexes == [0, 1, 2] for indexes, _ in stored)
    assert all(indexes == [3, 4, 5] for indexes, _ in live)


# -- what a run viewer receives ---------------------------------------------------------------------------

def test_run_viewer_gets_summary_statuses_steps_and_a_fresh_summary_after_a_finish(run, owner):
    first, second = run.rollouts.order_by("id")

    cookie = session_cookie(owner)

    async def scenario():
        comm = communicator(f"/ws/runs/{run.pk}/", cookie)
        assert (await comm.connect())[0]
        opening = await comm.receive_json_from(timeout=3)
        await async_to_sync_in_thread(write_and_publish, first, range(3))
        steps = await comm.receive_json_from(timeout=3)
        await async_to_sync_in_thread(set_status, first, RolloutStatus.SUCCEEDED)
        await async_to_sync_in_thread(set_status, second, RolloutStatus.FAILED)
        rest = [await comm.receive_json_from(timeout=3) for _ in range(3)]
        await comm.disconnect()
        return opening, steps, rest

    opening, steps, rest = async_to_sync(scenario)()
    assert opening["type"] == "run" and opening["summary"]["total"] == 2 and opening["summary"]["done"] == 0
    assert steps == {"type": "steps", "rollout_id": first.pk, "steps": [step_dict(i) for i in range(3)]}
    assert [m["type"] for m in rest] == ["status", "status", "run"]
    assert rest[0]["rollout_id"] == first.pk and rest[1]["status"] == "failed"
    # Two finishes in a row give one summary (throttled), read after both.
    assert rest[2]["summary"]["done"] == 2


def test_run_viewers_share_one_subscription_and_batched_ones_get_the_same_messages_together(run, owner):
    """30 viewers of a run (half asking for batches) are one member of the run's group; each gets every
    message once, in order; once they have left the process follows the run no more."""
    first, second = run.rollouts.order_by("id")
    cookie = session_cookie(owner)

    async def read(comm, until_done: int) -> list[dict]:
        # Until a summary counts them done and both statuses are in: the throttled summary is sent from
        # the database's figures, and may reach a viewer just before the second status does.
        messages = []
        while not (any(m["type"] == "run" and m["summary"]["done"] == until_done for m in messages)
                   and sum(m["type"] == "status" for m in messages) == until_done):
            frame = await comm.receive_json_from(timeout=5)
            messages.extend(frame["messages"] if frame["type"] == "batch" else [frame])
        return messages

    async def scenario():
        import asyncio

        comms = [communicator(f"/ws/runs/{run.pk}/" + ("?batch=1" if i % 2 else ""), cookie) for i in range(30)]
        for comm in comms:
            assert (await comm.connect())[0]
        fanout = run_fanout()
        members = len(fanout.viewers[run.pk])
        await async_to_sync_in_thread(write_and_publish, first, range(0, 3))
        await async_to_sync_in_thread(write_and_publish, second, range(0, 2))
        await async_to_sync_in_thread(write_and_publish, first, range(3, 5))
        await async_to_sync_in_thread(set_status, first, RolloutStatus.SUCCEEDED)
        await async_to_sync_in_thread(set_status, second, RolloutStatus.FAILED)
        seen = await asyncio.gather(*(read(comm, 2) for comm in comms))
        for comm in comms:
            await comm.disconnect()
        return seen, members, dict(fanout.viewers)

    seen, members, left = async_to_sync(scenario)()
    assert members == 30 and left == {}
    for messages in seen:
        assert messages[0]["type"] == "run"
        steps = [(m["rollout_id"], s["index"]) for m in messages if m["type"] == "steps" for s in m["steps"]]
        assert steps == [(first.pk, 0), (first.pk, 1), (first.pk, 2), (second.pk, 0), (second.pk, 1), (first.pk, 3), (first.pk, 4)]
        assert [(m["rollout_id"], m["status"]) for m in messages if m["type"] == "status"] == [(first.pk, "succeeded"), (second.pk, "failed")]


# -- helpers -------------------------------------------------------------------------------------------------

def _store_silently(rollout: Rollout, indexes) -> None:
    Step.objects.bulk_create([Step(rollout_id=rollout.pk, **step_row(i)) for i in indexes])


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def async_to_sync_in_thread(fn, *args):
    """Run a sync database write + publish off the event loop, as the Celery worker would."""
    return await database_sync_to_async(fn)(*args)
