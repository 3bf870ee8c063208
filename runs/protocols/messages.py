"""OpenEnv's message shapes (openenv-core 0.3.0, env_server/types.py), checked with pydantic so a
malformed message gets the same `errors` list OpenEnv's own server sends."""
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WSResetMessage(_Message):
    type: Literal["reset"] = "reset"
    data: dict[str, Any] = Field(default_factory=dict)


class WSStepMessage(_Message):
    type: Literal["step"] = "step"
    data: dict[str, Any]


class WSStateMessage(_Message):
    type: Literal["state"] = "state"


class WSCloseMessage(_Message):
    type: Literal["close"] = "close"


class WSMCPMessage(_Message):
    type: Literal["mcp"] = "mcp"
    data: dict[str, Any]


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


WS_MESSAGES = {"reset": WSResetMessage, "step": WSStepMessage, "state": WSStateMessage, "close": WSCloseMessage,
               "mcp": WSMCPMessage}


def plainly_valid(kind: str, data: dict) -> bool:
    """The common well-formed step (`{"type": "step", "data": {...}}`), known valid without pydantic:
    a training loop's hottest message skips the model's validation cost."""
    return kind == "step" and len(data) == 2 and isinstance(data.get("data"), dict)


def parse(kind: str, data: dict) -> BaseModel:
    return WS_MESSAGES[kind].model_validate(data)


def errors_of(exc: ValidationError, prefix: list | None = None, *, url: bool = True) -> list[dict]:
    """pydantic's errors as JSON: a websocket message's as OpenEnv sends `e.errors()` (with `url`), an
    HTTP body's as FastAPI answers them (`prefix=["body"]`, `url=False`)."""
    errors = []
    for error in exc.errors(include_url=url):
        shaped = {"type": error["type"], "loc": [*(prefix or []), *error["loc"]], "msg": error["msg"], "input": error.get("input")}
        if error.get("ctx"):
            shaped["ctx"] = {key: value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
                             for key, value in error["ctx"].items()}
        if url and error.get("url"):
            shaped["url"] = error["url"]
        errors.append(shaped)
    return errors
