"""Provider-neutral model shapes: requests, responses, tool calls and result envelopes. Pure.

These values cross the activity boundary, where only plain JSON travels safely, so every type has
``to_dict`` and a validating ``from_dict``, and ``from_dict(x.to_dict()) == x`` holds for all
of them. Activities translate a provider's reply into these shapes; orchestrators, the offline
planner and the turn policy see nothing provider-specific.

Shapes:
* ``ToolCall``       ``{"id", "name", "arguments": {...}}`` (arguments already decoded);
* ``ModelResponse``  ``{"content", "tool_calls", "usage": {"prompt_tokens",
  "completion_tokens"}, "finish_reason", "model"}``;
* ``ModelRequest``   ``{"messages", "tools", "model"}``: chat-completions messages and tool specs;
* ``ModelResult``    the envelope a model-call activity returns instead of raising (Durable
  Functions flattens exception types across the activity boundary):
  ``{"ok": true, "response": {...}}`` or
  ``{"ok": false, "kind": "rate_limited"|"transient"|"fatal"|"timeout", "message",
  "retry_after": seconds|null}``.

``messages_from_entries`` maps session entries ``{n, role, kind, text, data}`` to OpenAI chat
messages, one message per entry, in order: an assistant entry's ``data.tool_calls`` (neutral
``ToolCall`` dicts) become ``tool_calls``, and a tool entry's ``data.tool_call_id`` links it to
its call. Entries must arrive with their text resolved (an entry holding only a
``content_ref`` is an error). Malformed input raises ``ModelIOError`` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias, cast, get_args

JsonValue: TypeAlias = "str | int | float | bool | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
FailureKind = Literal["rate_limited", "transient", "fatal", "timeout"]

_FAILURE_KINDS: tuple[str, ...] = get_args(FailureKind)


class ModelIOError(ValueError):
    """A model shape or session entry is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call consumed."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> JsonObject:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}

    @classmethod
    def from_dict(cls, raw: object) -> Usage:
        data = _object(raw, "usage")
        return cls(
            prompt_tokens=_count(data, "prompt_tokens", "usage"),
            completion_tokens=_count(data, "completion_tokens", "usage"),
        )


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation a model asked for, with decoded arguments."""

    id: str
    name: str
    arguments: JsonObject

    def to_dict(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    def to_openai(self) -> JsonObject:
        """The chat-completions form: arguments travel as a JSON string."""
        encoded = json.dumps(self.arguments, sort_keys=True, ensure_ascii=False)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": encoded},
        }

    @classmethod
    def from_dict(cls, raw: object) -> ToolCall:
        data = _object(raw, "tool_call")
        return cls(
            id=_str(data, "id", "tool_call"),
            name=_str(data, "name", "tool_call"),
            arguments=_json_object(data.get("arguments", {}), "tool_call.arguments"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """What a model (or the offline planner) answered in one round."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"
    model: str = ""

    def to_dict(self) -> JsonObject:
        return {
            "content": self.content,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "usage": self.usage.to_dict(),
            "finish_reason": self.finish_reason,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, raw: object) -> ModelResponse:
        data = _object(raw, "response")
        return cls(
            content=_optional_str(data, "content", "response"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in _list(data, "tool_calls", "response")),
            usage=Usage.from_dict(data.get("usage", {})),
            finish_reason=_str(data, "finish_reason", "response"),
            model=_str(data, "model", "response"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One chat-completions request: messages, tool specs and an optional model name."""

    messages: tuple[JsonObject, ...]
    tools: tuple[JsonObject, ...] = ()
    model: str | None = None

    @classmethod
    def from_entries(
        cls,
        entries: Iterable[Mapping[str, object]],
        tools: Iterable[JsonObject] = (),
        model: str | None = None,
    ) -> ModelRequest:
        return cls(messages=tuple(messages_from_entries(entries)), tools=tuple(tools), model=model)

    def to_dict(self) -> JsonObject:
        return {"messages": list(self.messages), "tools": list(self.tools), "model": self.model}

    @classmethod
    def from_dict(cls, raw: object) -> ModelRequest:
        data = _object(raw, "request")
        return cls(
            messages=tuple(
                _json_object(m, "request.messages") for m in _list(data, "messages", "request")
            ),
            tools=tuple(_json_object(t, "request.tools") for t in _list(data, "tools", "request")),
            model=_optional_str(data, "model", "request"),
        )


@dataclass(frozen=True, slots=True)
class ModelSuccess:
    """The ``ok: true`` envelope: a model call produced a response."""

    response: ModelResponse

    def to_dict(self) -> JsonObject:
        return {"ok": True, "response": self.response.to_dict()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFailure:
    """The ``ok: false`` envelope; ``kind`` drives the retry decision (see turn_policy)."""

    kind: FailureKind
    message: str
    retry_after: float | None = None

    def to_dict(self) -> JsonObject:
        return {
            "ok": False,
            "kind": self.kind,
            "message": self.message,
            "retry_after": self.retry_after,
        }


ModelResult: TypeAlias = ModelSuccess | ModelFailure


def result_from_dict(raw: object) -> ModelResult:
    """Decode a model-call envelope; raises ``ModelIOError`` naming the bad field."""
    data = _object(raw, "result")
    ok = data.get("ok")
    if ok is True:
        return ModelSuccess(ModelResponse.from_dict(data.get("response")))
    if ok is not False:
        raise ModelIOError("result.ok must be true or false")
    kind = data.get("kind")
    if kind not in _FAILURE_KINDS:
        raise ModelIOError(f"result.kind must be one of {', '.join(_FAILURE_KINDS)}, not {kind!r}")
    return ModelFailure(
        kind=cast(FailureKind, kind),  # membership checked above
        message=_str(data, "message", "result"),
        retry_after=_seconds(data.get("retry_after")),
    )


def _seconds(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ModelIOError("result.retry_after must be a non-negative number of seconds or null")
    return float(value)


def messages_from_entries(entries: Iterable[Mapping[str, object]]) -> list[JsonObject]:
    """Turn session entries into chat-completions messages, one per entry, in order."""
    return [_message_from_entry(entry) for entry in entries]


def _message_from_entry(entry: Mapping[str, object]) -> JsonObject:
    where = f"entry {entry.get('n', '?')}"
    role = entry.get("role")
    text = _optional_str(entry, "text", where)
    if text is None and entry.get("content_ref") is not None:
        # Large texts live in the content store; this pure function cannot fetch them.
        raise ModelIOError(f"{where}.content_ref must be resolved to text before the model call")
    data = _object(entry.get("data") or {}, f"{where}.data")
    match role:
        case "user" | "system":
            return {"role": str(role), "content": text or ""}
        case "assistant":
            message: JsonObject = {"role": "assistant", "content": text}
            calls = [ToolCall.from_dict(c).to_openai() for c in _list(data, "tool_calls", where)]
            if calls:
                message["tool_calls"] = list[JsonValue](calls)
            return message
        case "tool":
            call_id = _str(data, "tool_call_id", f"{where}.data")
            return {"role": "tool", "tool_call_id": call_id, "content": _tool_content(text, data)}
        case _:
            raise ModelIOError(f"{where}.role must be user, assistant, tool or system: {role!r}")


def _tool_content(text: str | None, data: Mapping[str, object]) -> str:
    # The chat API requires a string; a result committed only as data is sent as its JSON.
    if text is not None:
        return text
    if "result" in data:
        return json.dumps(_json(data["result"], "data.result"), sort_keys=True, ensure_ascii=False)
    return ""


def _object(raw: object, where: str) -> Mapping[str, object]:
    if not isinstance(raw, Mapping):
        raise ModelIOError(f"{where} must be an object")
    return cast("Mapping[str, object]", raw)


def _str(data: Mapping[str, object], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ModelIOError(f"{where}.{key} must be a string")
    return value


def _optional_str(data: Mapping[str, object], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ModelIOError(f"{where}.{key} must be a string or null")
    return value


def _count(data: Mapping[str, object], key: str, where: str) -> int:
    value = data.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ModelIOError(f"{where}.{key} must be a non-negative integer")
    return value


def _list(data: Mapping[str, object], key: str, where: str) -> list[object]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ModelIOError(f"{where}.{key} must be a list")
    return list(cast("list[object]", value))


def _json_object(raw: object, where: str) -> JsonObject:
    value = _json(raw, where)
    if not isinstance(value, dict):
        raise ModelIOError(f"{where} must be an object")
    return value


def _json(raw: object, where: str) -> JsonValue:
    """Copy ``raw`` as plain JSON, rejecting anything ``json.dumps`` would not round-trip."""
    if raw is None or isinstance(raw, str | bool | int | float):
        return raw
    if isinstance(raw, list | tuple):
        return [_json(item, where) for item in cast("list[object]", raw)]
    if isinstance(raw, Mapping):
        copied: JsonObject = {}
        for key, item in cast("Mapping[object, object]", raw).items():
            if not isinstance(key, str):
                raise ModelIOError(f"{where} has a non-string key {key!r}")
            copied[key] = _json(item, f"{where}.{key}")
        return copied
    raise ModelIOError(f"{where} holds a {type(raw).__name__}, which is not JSON")
