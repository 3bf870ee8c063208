"""A stand-in OpenAI-compatible server on loopback with scripted replies, and model-agent builders."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs import services
from tests.runs.rollout_factories import demo_version

SECRET = "sk-test-SECRET-3f9a1c77e0"


def tool_call(name, arguments, call_id=None):
    """One tool call as the model sends it; `arguments` is a dict (sent as JSON text) or raw text."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}_{abs(hash(text)) % 10_000}", "type": "function",
            "function": {"name": name, "arguments": text}}


def reply(*calls, content=None, usage=(10, 5)):
    """A chat completion whose message holds these tool calls (or just `content`)."""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "model": "stand-in",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[0] + usage[1]},
    }


class Scripted:
    """What the server answers next: a JSON body, or an HTTP error, optionally after a delay."""

    def __init__(self, body=None, status=200, delay_s=0.0, headers=None):
        self.body, self.status, self.delay_s, self.headers = body, status, delay_s, headers or {}


class StandInModel:
    """Answers POST /v1/chat/completions from a script, in order; records every request it got."""

    def __init__(self):
        self.script: list[Scripted] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.fallback = Scripted(reply(content="(script exhausted)"))

    def add(self, *items):
        for item in items:
            self.script.append(item if hasattr(item, "delay_s") else Scripted(item))  # conftest may load twice

    def next(self, request: dict) -> Scripted:
        with self.lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else self.fallback


@pytest.fixture
def model_server(settings, monkeypatch):
    """The stand-in model; `.base_url` is what an agent's config points at. It listens on loopback,
    which the egress policy refuses unless allowed: allowed here, and for the workers tests start."""
    model = StandInModel()
    settings.MODEL_EGRESS_ALLOW = ["127.0.0.1"]
    monkeypatch.setenv("MODEL_EGRESS_ALLOW", "127.0.0.1")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            item = model.next({"path": self.path, "headers": dict(self.headers), "body": body})
            if item.delay_s:
                time.sleep(item.delay_s)
            data = json.dumps(item.body if item.body is not None else {"error": {"message": "scripted error"}}).encode()
            try:
                self.send_response(item.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in item.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    model.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield model
    server.shutdown()
    server.server_close()


@pytest.fixture
def inventory(team, owner):
    return demo_version(team, owner, "inventory_tools")


@pytest.fixture
def model_agent(team, owner, model_server):
    """model_agent(**config) -> an `openai` agent pointed at the stand-in server, with SECRET as its key."""

    def build(name="model", **config):
        config = {"base_url": model_server.base_url, "model": "stand-in", "retry_backoff_s": 0.01,
                  "retry_backoff_max_s": 0.05, **config}
        return services.agent_create(team=team, actor=owner, name=name, kind="openai", config=config, api_key=SECRET)

    return build
