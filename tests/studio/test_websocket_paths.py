"""A websocket to a path no app serves is closed with 4404, like an unknown rollout, never a 500."""
import sys
import types

import pytest
from asgiref.sync import async_to_sync

from studio.asgi import application

try:
    from channels.testing import WebsocketCommunicator
except ModuleNotFoundError:
    sys.modules.setdefault("daphne", types.ModuleType("daphne"))
    sys.modules["daphne.testing"] = types.SimpleNamespace(DaphneProcess=None)
    from channels.testing import WebsocketCommunicator

pytestmark = pytest.mark.django_db(transaction=True)


async def close_code(path: str):
    comm = WebsocketCommunicator(application, path)
    connected, _ = await comm.connect(timeout=5)
    if not connected:
        return "handshake refused"
    output = await comm.receive_output(timeout=5)
    await comm.disconnect()
    assert output["type"] == "websocket.close", output
    return output.get("code")


@pytest.mark.parametrize("path", ["/ws/nothing/", "/", "/ws/rollouts/abc/", "/ws/runs/1/extra/", "/ws/%00/"])
def test_unknown_websocket_paths_close_with_4404(path):
    assert async_to_sync(close_code)(path) == 4404


def test_an_id_past_a_bigint_closes_cleanly():
    assert async_to_sync(close_code)("/ws/rollouts/99999999999999999999/") in (4401, 4404)
