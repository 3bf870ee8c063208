"""The `openai` agent: a language model behind an OpenAI-compatible chat completions endpoint.

The policy runs in the worker (the model is a network service; the API key never enters a sandbox).
Each observation becomes chat messages, the environment's `tools` are offered as function tools, and
each tool call the model makes becomes one step action `{"tool": name, "arguments": {...}}` whose
resulting observation goes back as the tool's result. A malformed call (bad JSON, unknown tool,
arguments failing the tool's schema) is recorded as a step the environment never sees, and the model
reads the error on its next turn; HTTP 429/5xx and timeouts are retried with bounded backoff.

A reply with text and no tool call is the model's answer: when environment.toml names a
`text_answer` tool the text becomes that tool's call (the episode's last action), otherwise the
episode ends there; either way the verifier judges it. Each model exchange is recorded on the step of
its first call: the messages added since the previous request, the assistant message as received
and, on the first turn, the tools offered, so exports rebuild exactly the transcript the model saw.
"""
import base64
import hashlib
import json
import logging
import random
import time

import httpx
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from studio.errors import DomainError
from studio.install_secret import install_secret
from studio_client.tools import text_answer_call

from .agent_errors import AgentDone, AgentFailed, AgentStepError
from .artifacts import array_json_default
from .egress import EgressRefused, pinned_client
from .models import Agent, AgentSecret

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent acting in an environment. Reach the task's goal by calling the tools you are "
    "offered, one call at a time, and read each result before the next call.\n\nTask: {task}"
)
DEFAULTS = {
    "temperature": 0.0,
    "max_tokens": 1024,
    "max_turns": 30,
    "timeout_s": 60.0,
    "max_retries": 4,
    "retry_backoff_s": 0.5,
    "retry_backoff_max_s": 8.0,
    "max_errors": 3,
    "system_prompt": DEFAULT_SYSTEM_PROMPT,
}
# Optional prices for the run usage summary, in any currency per million tokens.
PRICE_KEYS = ("price_prompt_per_mtok", "price_completion_per_mtok")
NUMBER_RANGES = {
    "temperature": (0.0, 2.0),
    "max_tokens": (1, 1_000_000),
    "max_turns": (1, 10_000),
    "timeout_s": (0.1, 3600.0),
    "max_retries": (0, 20),
    "retry_backoff_s": (0.0, 60.0),
    "retry_backoff_max_s": (0.0, 600.0),
    "max_errors": (1, 100),
    "price_prompt_per_mtok": (0.0, 1e6),
    "price_completion_per_mtok": (0.0, 1e6),
}
INTEGER_KEYS = ("max_tokens", "max_turns", "max_retries", "max_errors")
CONFIG_KEYS = ("base_url", "model", "system_prompt", *NUMBER_RANGES)
RETRY_STATUSES = (429, 500, 502, 503, 504)
REPLY_TEXT_LIMIT = 20_000


class InvalidModelConfig(DomainError):
    pass


# -- configuration and the secret -----------------------------------------------------------------


def checked_config(config: dict | None, api_key: str = "") -> tuple[dict, str]:
    """The config to store (defaults filled in, any `api_key` taken out) and the key to keep apart."""
    config = dict(config or {})
    api_key = (api_key or config.pop("api_key", "") or "").strip()
    config.pop("api_key", None)
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise InvalidModelConfig(f"Unknown config keys {', '.join(unknown)}; keys are {', '.join(CONFIG_KEYS)}.", field="config")
    base_url = str(config.get("base_url") or "").strip().rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise InvalidModelConfig("base_url must be an http:// or https:// URL, e.g. http://localhost:8000/v1.", field="config.base_url")
    model = str(config.get("model") or "").strip()
    if not model:
        raise InvalidModelConfig("model is required (the model name the endpoint serves).", field="config.model")
    checked = {**DEFAULTS, **config, "base_url": base_url, "model": model}
    for key, (low, high) in NUMBER_RANGES.items():
        if key not in checked:
            continue
        value = checked[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise InvalidModelConfig(f"{key} must be a number from {low:g} to {high:g}, not {value!r}.", field=f"config.{key}")
        if key in INTEGER_KEYS:
            if int(value) != value:
                raise InvalidModelConfig(f"{key} must be a whole number.", field=f"config.{key}")
            checked[key] = int(value)
    if not isinstance(checked["system_prompt"], str):
        raise InvalidModelConfig("system_prompt must be text.", field="config.system_prompt")
    return checked, api_key


ENCRYPTED_PREFIX = "fernet:"


def default_model_key(*, secret: bytes) -> bytes:
    """The Fernet key model API keys are stored with when MODEL_KEY_ENCRYPTION_KEY is unset, from `secret`
    (the install secret; before it existed, SECRET_KEY: migration 0022 re-encrypts with this)."""
    return base64.urlsafe_b64encode(hashlib.sha256(b"environment-studio model API keys\0" + secret).digest())


def _fernet() -> Fernet:
    """settings.MODEL_KEY_ENCRYPTION_KEY, or a key derived from the install secret."""
    configured = getattr(settings, "MODEL_KEY_ENCRYPTION_KEY", "")
    key = configured.encode() if configured else default_model_key(secret=install_secret())
    try:
        return Fernet(key)
    except ValueError:
        raise ImproperlyConfigured("MODEL_KEY_ENCRYPTION_KEY must be a Fernet key (32 url-safe base64-encoded bytes)") from None


def api_key_encrypt(api_key: str) -> str:
    """The form an API key is stored in (empty stays empty)."""
    if not api_key:
        return ""
    return ENCRYPTED_PREFIX + _fernet().encrypt(api_key.encode("utf-8")).decode("ascii")


def api_key_decrypt(stored: str) -> str:
    """The key back from its stored form; a value stored before encryption (no prefix) as it is."""
    if not stored or not stored.startswith(ENCRYPTED_PREFIX):
        return stored or ""
    try:
        return _fernet().decrypt(stored[len(ENCRYPTED_PREFIX):].encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise AgentFailed("the agent's API key cannot be decrypted with this studio's MODEL_KEY_ENCRYPTION_KEY; set the key again") from None


def agent_api_key_set(*, agent: Agent, api_key: str, actor=None) -> None:
    """Store (or clear, with "") the agent's API key, encrypted; it is never read back through any interface."""
    with transaction.atomic():
        AgentSecret.objects.update_or_create(agent=agent, defaults={"api_key": api_key_encrypt((api_key or "").strip())})


def api_key_of(agent: Agent) -> str:
    return api_key_decrypt(AgentSecret.objects.filter(agent=agent).values_list("api_key", flat=True).first() or "")


# -- tool-call arguments against JSON schema -------------------------------------------------------

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def schema_error(value, schema: dict, path: str = "arguments") -> str | None:
    """The first way `value` fails `schema` (the subset of JSON schema tool specs use), or None."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return f"{path} must be of type {' or '.join(kinds)}, not {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} must be one of {json.dumps(schema['enum'])}"
    if "const" in schema and value != schema["const"]:
        return f"{path} must be {json.dumps(schema['const'])}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path} is shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} is longer than {schema['maxLength']} characters"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} must be at most {schema['maximum']}"
    if isinstance(value, dict):
        for name in schema.get("required") or ():
            if name not in value:
                return f"{path}.{name} is required"
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                error = schema_error(item, properties[name], f"{path}.{name}")
            elif extra is False:
                error = f"{path}.{name} is not a known argument; arguments are {', '.join(sorted(properties)) or 'none'}"
            else:
                error = schema_error(item, extra, f"{path}.{name}") if isinstance(extra, dict) else None
            if error:
                return error
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{path} needs at least {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path} has more than {schema['maxItems']} items"
        for position, item in enumerate(value):
            error = schema_error(item, schema.get("items") or {}, f"{path}[{position}]")
            if error:
                return error
    return None


# -- the model endpoint ----------------------------------------------------------------------------


class ModelEndpoint:
    """POST /chat/completions with bounded retries: 429, 5xx, timeouts and connection errors are
    retried after an exponential backoff (a Retry-After header is honoured up to the cap)."""

    def __init__(self, config: dict, api_key: str):
        self.config = config
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        timeout = float(config["timeout_s"])
        self.client = pinned_client(
            base_url=config["base_url"], headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        )
        self.rng = random.Random()

    def complete(self, body: dict) -> tuple[dict, dict]:
        """The parsed reply and facts about the exchange (latency, attempts, what was retried)."""
        attempts, retried = 0, []
        max_retries = int(self.config["max_retries"])
        started = time.perf_counter()
        while True:
            attempts += 1
            wait_hint = None
            try:
                # Every new connection resolves the host once and connects only to the checked addresses.
                response = self.client.post("/chat/completions", json=body)
            except EgressRefused as exc:
                raise AgentFailed(f"model endpoint refused by the egress policy: {exc.message}") from None
            except httpx.TimeoutException:
                problem = f"no answer within timeout_s={self.config['timeout_s']:g} s"
            except httpx.TransportError as exc:
                problem = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                if response.status_code == 200:
                    try:
                        reply = response.json()
                        message = reply["choices"][0]["message"]
                        if not isinstance(message, dict):
                            raise TypeError("message is not an object")
                    except (ValueError, KeyError, IndexError, TypeError) as exc:
                        # The reply's own text stays out of the error: it may come from a service that is not a model.
                        raise AgentFailed(f"model endpoint: malformed chat completion ({type(exc).__name__})") from None
                    facts = {"latency_ms": round((time.perf_counter() - started) * 1000.0, 2), "attempts": attempts}
                    if retried:
                        facts["retried"] = retried
                    return reply, facts
                problem = f"HTTP {response.status_code}: {_body_snippet(response)}"
                if response.status_code not in RETRY_STATUSES:
                    raise AgentFailed(f"model endpoint refused the request: {problem}")
                wait_hint = _retry_after(response)
            retried.append(problem)
            if attempts > max_retries:
                raise AgentFailed(f"model endpoint failed {attempts} times; last: {problem}")
            time.sleep(self._backoff(attempts, wait_hint))

    def _backoff(self, attempt: int, hint: float | None) -> float:
        cap = float(self.config["retry_backoff_max_s"])
        if hint is not None:
            return min(hint, cap)
        base = float(self.config["retry_backoff_s"]) * (2 ** (attempt - 1))
        return min(cap, base * (0.5 + self.rng.random() / 2))  # jitter: retries of many rollouts spread out

    def close(self) -> None:
        self.client.close()


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _body_snippet(response: httpx.Response) -> str:
    """An OpenAI-shaped error's message (`{"error": {"message": ...}}`), and nothing else of the reply:
    rollout errors are shown on pages, and a reply of some other service must not be echoed there."""
    try:
        body = response.json()
    except ValueError:
        return "(reply is not an OpenAI error object)"
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str):
        return body["error"]["message"][:300]
    return "(reply is not an OpenAI error object)"


# -- the policy ------------------------------------------------------------------------------------


def _as_text(value) -> str:
    # Arrays (image observations) in their inline JSON form (docs/observations.md).
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=array_json_default)


# What the model reads after each of its actions: one definition, used by the policy and by exports
# (which rebuild the results of the last turn, the ones no later request carried).

def tool_result_message(call_id: str, observation) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": _as_text(observation)}


def step_error_message(call_id: str | None, reason: str) -> dict:
    if call_id is not None:
        return {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"error": reason})}
    return {"role": "user", "content": f"Error: {reason}"}


class OpenAIPolicy:
    """Drives one episode: the engine calls `act` for each action; one model reply may hold several
    tool calls, which become consecutive steps before the model is asked again."""

    sandbox = None  # the model is a network service: nothing of this policy runs in a sandbox

    def __init__(self, agent: Agent, *, seed: int, api_key: str | None = None, text_answer: str | None = None):
        self.agent = agent
        self.seed = seed
        self.text_answer = text_answer  # environment.toml's `text_answer`: the tool a text reply calls
        self.answered = False  # a text answer was played: the episode ends at the next turn
        self.sent_upto = 0  # messages[:sent_upto] are already in an earlier exchange's record
        self.config, _ = checked_config(agent.config)
        self.api_key = api_key_of(agent) if api_key is None else api_key
        self.endpoint: ModelEndpoint | None = None
        self.facts: dict = {}
        self.messages: list[dict] = []
        self.tools: dict[str, dict] = {}
        self.queue: list[tuple[dict, dict]] = []  # (tool call, step record) not yet played
        self.awaiting: str | None = None  # the tool call id whose result the next observation is
        self.turns = 0
        self.errors_in_a_row = 0
        self.step_record: dict | None = None
        self.error_fed = False  # the model was just told of a malformed action: no need to repeat the observation
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    # engine interface

    def start(self, *, env, task: dict, seed: int, limits) -> None:
        specs = [spec.get("function", spec) for spec in (env.tools or [])]
        self.tools = {spec["name"]: spec for spec in specs if isinstance(spec, dict) and spec.get("name")}
        prompt = self.config["system_prompt"]
        for key, value in (("{task}", _as_text(task)), ("{task_id}", str(task.get("id", ""))),
                           ("{tools}", ", ".join(self.tools))):
            prompt = prompt.replace(key, value)
        self.messages = [{"role": "system", "content": prompt}]
        self.sent_upto = 0
        self.endpoint = ModelEndpoint(self.config, self.api_key)
        self.facts = {"model": self.config["model"], "base_url": self.config["base_url"]}

    def act(self, observation, info):
        self.step_record = None
        if self.answered:
            raise AgentDone("answered", "the model gave its answer as text")
        if self.awaiting is not None:
            self.messages.append(tool_result_message(self.awaiting, observation))
            self.awaiting = None
        elif not self.queue and not self.error_fed:
            self.messages.append({"role": "user", "content": self._observation_text(observation)})
        self.error_fed = False
        while not self.queue:
            self._ask()
        call, record = self.queue.pop(0)
        self.step_record = record
        return self._action_from(call)

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()

    # the conversation

    def _observation_text(self, observation) -> str:
        if len(self.messages) == 1:
            return f"Observation: {_as_text(observation)}"
        return _as_text(observation)

    def _ask(self) -> None:
        if self.turns >= self.config["max_turns"]:
            raise AgentDone("max_turns", f"the model used its {self.config['max_turns']} turns")
        self.turns += 1
        body = {
            "model": self.config["model"],
            "messages": self.messages,
            "temperature": self.config["temperature"],
            "max_tokens": self.config["max_tokens"],
            "seed": self.seed,
        }
        if self.tools:
            body["tools"] = [{"type": "function", "function": spec} for spec in self.tools.values()]
        request_bytes = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
        reply, exchange = self.endpoint.complete(body)
        choice = reply["choices"][0]
        message = choice["message"]
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        for key in self.usage:
            if isinstance(usage.get(key), (int, float)):
                self.usage[key] += int(usage[key])
        tool_calls = [call for call in (message.get("tool_calls") or []) if isinstance(call, dict)]
        content = message.get("content") if isinstance(message.get("content"), str) else None
        record = {
            "turn": self.turns,
            "request": {"messages": len(self.messages), "bytes": request_bytes},
            # What this request added to the conversation (earlier records hold the rest) ...
            "messages": self.messages[self.sent_upto:],
            "reply": {
                "content": (content or "")[:REPLY_TEXT_LIMIT] or None,
                "tool_calls": [
                    {"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                     "arguments": (c.get("function") or {}).get("arguments")} for c in tool_calls
                ],
                "finish_reason": choice.get("finish_reason"),
            },
            "usage": usage,
            **exchange,
        }
        if self.turns == 1:
            record["tools"] = body.get("tools") or []
        assistant = {"role": "assistant", "content": content}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        self.messages.append(assistant)
        record["assistant"] = assistant  # ... and the reply as received, arguments as the model wrote them
        self.sent_upto = len(self.messages)
        if tool_calls:
            for position, call in enumerate(tool_calls):
                # The exchange is recorded once, on the step of its first call, so sums stay right.
                step_record = record if position == 0 else {"turn": self.turns, "call": position}
                step_record["call_id"] = call.get("id") or f"call_{self.turns}"
                self.queue.append((call, step_record))
        else:
            self.queue.append(({"text": content or ""}, record))

    def _action_from(self, call: dict):
        if "text" in call:
            self.errors_in_a_row = 0
            if self.tools:
                return self._text_answer(call["text"])
            text = call["text"].strip()
            try:
                return json.loads(text)
            except ValueError:
                return text
        function = call.get("function") or {}
        call_id = call.get("id") or f"call_{self.turns}"
        name = function.get("name")
        raw = function.get("arguments")
        action = {"tool": name, "arguments": raw}
        if name not in self.tools:
            self._step_error(action, call_id, f"unknown tool {name!r}; tools are {', '.join(self.tools)}")
        if isinstance(raw, dict):
            arguments = raw
        else:
            try:
                arguments = json.loads(raw or "{}")
            except (TypeError, ValueError) as exc:
                self._step_error(action, call_id, f"the arguments of {name} are not valid JSON ({exc})")
        if not isinstance(arguments, dict):
            self._step_error(action, call_id, f"the arguments of {name} must be a JSON object")
        error = schema_error(arguments, self.tools[name].get("parameters") or {})
        if error:
            self._step_error({"tool": name, "arguments": arguments}, call_id, f"the arguments of {name} fail its schema: {error}")
        self.errors_in_a_row = 0
        self.awaiting = call_id
        return {"tool": name, "arguments": arguments}

    def _text_answer(self, text: str):
        """A reply without a tool call is the model's answer: the environment's text_answer tool gets
        it as its last action, or, without one, the episode ends here; the verifier judges either."""
        target = text_answer_call(self.text_answer, self.tools)
        self.step_record["text_answer"] = True
        if target is None:
            why = ("" if not self.text_answer else
                   f" (text_answer {self.text_answer!r} names no tool with a text argument among {', '.join(self.tools)})")
            raise AgentDone("answered", f"the model answered in text{why}", record=self.step_record)
        self.answered = True
        return {"tool": target[0], "arguments": {target[1]: text}}

    def _step_error(self, action, call_id: str | None, reason: str):
        """Tell the model what was wrong (as the call's result, or as a user message), then raise."""
        self.errors_in_a_row += 1
        self.error_fed = True
        self.messages.append(step_error_message(call_id, reason))
        if self.errors_in_a_row >= self.config["max_errors"]:
            raise AgentFailed(f"the model made {self.errors_in_a_row} malformed actions in a row; last: {reason}")
        raise AgentStepError(action, reason)


# -- usage of a run --------------------------------------------------------------------------------

# Step info is stored as `json` (its key order kept); the jsonb operators need it cast.
_USAGE_SQL = """
    SELECT {sums}, COUNT(*) FILTER (WHERE s.info ? 'agent' AND s.info->'agent' ? 'usage')
    FROM (SELECT st.info::jsonb AS info FROM runs_step st JOIN runs_rollout r ON r.id = st.rollout_id
          WHERE r.run_id = %s) s
"""
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def run_model_usage(run) -> dict:
    """Tokens a model agent's run used (summed from the steps' records), model calls, and the cost
    when the agent's config has prices per million tokens."""
    sums = ", ".join(
        f"COALESCE(SUM(CASE WHEN jsonb_typeof(s.info->'agent'->'usage'->'{key}') = 'number' "
        f"THEN (s.info->'agent'->'usage'->>'{key}')::numeric END), 0)"
        for key in _USAGE_KEYS
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_USAGE_SQL.format(sums=sums), [run.pk])
        *totals, calls = cursor.fetchone()
    usage = {key: int(value) for key, value in zip(_USAGE_KEYS, totals)}
    usage["model_calls"] = int(calls)
    config = run.agent.config or {}
    prices = [config.get(key) for key in PRICE_KEYS]
    usage["cost"] = (
        round((usage["prompt_tokens"] * prices[0] + usage["completion_tokens"] * prices[1]) / 1e6, 6)
        if all(isinstance(p, (int, float)) for p in prices) else None
    )
    return usage
