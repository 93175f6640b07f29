"""Background model requests: submit one, get a handle, poll it, cancel it. A provider port.

A background request outlives the process that made it: ``submit`` returns a ``Handle`` (the
provider's id) at once, and anyone holding the handle - the same process, or another one
after a crash - asks ``poll`` for the request's state until it is final. ``cancel`` asks the
provider to stop it. Nothing here waits between polls; the orchestrator does, on durable
timers (``orchestrators/model_wait.py``).

The port (``BackgroundProvider``), kept by both implementations:

* ``submit(request, timeout_s) -> Submitted | ModelFailure``: the handle and the first status,
  or a failure envelope mapped like a synchronous call (``model_provider.failure_from_status``:
  429 ``rate_limited``, 408/409/5xx/connection ``transient``, other 4xx ``fatal``);
* ``poll(handle, timeout_s) -> Polled`` and ``cancel(handle, timeout_s) -> Polled``: the
  request's status, one of ``queued``, ``in_progress``, ``completed`` (with the response),
  ``failed`` or ``cancelled`` (with a failure envelope naming the provider's answer), or
  ``unknown`` when this poll could not tell (connection lost, 429, 5xx): poll again later.
  A handle the provider does not know (404) is ``failed`` with ``fatal`` and the provider's
  answer: the call ends, it is never silently made again.

``ResponsesBackground``: the OpenAI-compatible Responses API in background mode
(``POST {base}/responses`` with ``background: true`` and ``store: true``, ``GET
{base}/responses/{id}``, ``POST {base}/responses/{id}/cancel``), through the ``openai`` package
with ``max_retries=0`` and the ``AGENT_MODEL_*`` settings of ``model_provider.ProviderConfig``.
``OfflineBackground``: the deterministic offline planner; its answer is computed at submit and
kept in the content store under the handle, so an offline handle survives a restart too.
``provider_for(config)`` picks one (None: offline).

The pure parts - chat messages to Responses input items (``responses_input``), tool specs
(``responses_tools``), a Responses body to a ``Polled`` (``polled_from_body``, the status
mapping) - are unit-tested without a server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import openai

from adapters import model_provider
from adapters.content_store import ContentNotFound, ContentStore
from adapters.model_provider import ProviderConfig, failure_from_status, tool_arguments
from kernel.turn import planner
from kernel.turn.model_io import (
    FailureKind,
    JsonObject,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)

RequestStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "unknown"]
PENDING_STATUSES: frozenset[str] = frozenset({"queued", "in_progress"})
# Failed requests whose error code says "try again": the call is retried like a 5xx.
_TRANSIENT_CODES = frozenset({"server_error", "rate_limit_exceeded"})
OFFLINE_PREFIX = "offline:"


@dataclass(frozen=True, slots=True)
class Handle:
    """A background request: the provider that holds it and its id there."""

    provider: str  # "responses" | "offline"
    id: str

    def to_dict(self) -> dict[str, str]:
        return {"provider": self.provider, "id": self.id}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Handle:
        return cls(provider=str(raw["provider"]), id=str(raw["id"]))


@dataclass(frozen=True, slots=True)
class Submitted:
    handle: Handle
    status: RequestStatus


@dataclass(frozen=True, slots=True)
class Polled:
    """A request's status; ``response`` when completed, ``failure`` when failed or cancelled,
    ``failure`` (transient) with status ``unknown`` when the poll itself could not tell."""

    status: RequestStatus
    response: ModelResponse | None = None
    failure: ModelFailure | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.response is not None:
            out.update(ok=True, response=self.response.to_dict())
        if self.failure is not None:
            out.update(self.failure.to_dict())
        return out


class BackgroundProvider(Protocol):
    async def submit(self, request: ModelRequest, timeout_s: float) -> Submitted | ModelFailure:
        """Start a background request; its handle, or why it was not started."""
        ...

    async def poll(self, handle: Handle, timeout_s: float) -> Polled:
        """The request's status now."""
        ...

    async def cancel(self, handle: Handle, timeout_s: float) -> Polled:
        """Ask the provider to stop the request; its status afterwards."""
        ...


# --- pure: the Responses API shapes ----------------------------------------------------------


def responses_input(messages: Sequence[Mapping[str, Any]]) -> list[JsonObject]:
    """Chat-completions messages as Responses input items, in order."""
    items: list[JsonObject] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id") or ""),
                    "output": str(message.get("content") or ""),
                }
            )
            continue
        content = message.get("content")
        if role != "assistant" or content:
            items.append({"role": str(role), "content": str(content or "")})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": str(call.get("id") or ""),
                    "name": str(function.get("name") or ""),
                    "arguments": str(function.get("arguments") or "{}"),
                }
            )
    return items


def responses_tools(specs: Sequence[Mapping[str, Any]]) -> list[JsonObject]:
    """Chat-completions tool specs (``{"type", "function": {...}}``) in the flat Responses form."""
    return [{"type": "function", **dict(spec.get("function") or {})} for spec in specs]


def response_from_body(body: Mapping[str, Any], default_model: str) -> ModelResponse:
    """The output of a finished Responses body in the neutral shape (reasoning items skipped)."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in body.get("output") or ():
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
        elif item.get("type") == "function_call":
            calls.append(
                ToolCall(
                    id=str(item.get("call_id") or item.get("id")),
                    name=str(item["name"]),
                    arguments=tool_arguments(item.get("arguments")),
                )
            )
    usage = body.get("usage") or {}
    incomplete = (body.get("incomplete_details") or {}).get("reason")
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
        finish_reason=str(incomplete or ("tool_calls" if calls else "stop")),
        model=str(body.get("model") or default_model),
    )


def polled_from_body(body: Mapping[str, Any], default_model: str) -> Polled:
    """The status mapping of one Responses body (see the module docstring)."""
    status = body.get("status")
    if status in PENDING_STATUSES:
        return Polled(status)
    if status in ("completed", "incomplete"):
        # "incomplete" is an answer cut short (output token limit): it is kept, with the
        # reason as its finish reason, like a chat completion that stopped on "length".
        try:
            return Polled("completed", response=response_from_body(body, default_model))
        except (KeyError, TypeError, ValueError) as exc:
            return _failed(f"unusable model reply: {exc}")
    if status == "failed":
        error = body.get("error") or {}
        code, message = str(error.get("code") or "error"), str(error.get("message") or "")
        kind: FailureKind = "transient" if code in _TRANSIENT_CODES else "fatal"
        text = f"the background model request failed: {code}: {message}"[:1000]
        return Polled("failed", failure=ModelFailure(kind=kind, message=text))
    if status == "cancelled":
        return Polled(
            "cancelled",
            failure=ModelFailure(
                kind="fatal", message="the background model request was cancelled"
            ),
        )
    return _failed(f"unusable model reply: status {status!r}")


def polled_from_error(status: int, headers: Mapping[str, str], message: str) -> Polled:
    """An HTTP error answered to a poll or cancel: 404 ends the call, the rest is ``unknown``."""
    if status == 404:
        return _failed(message)
    failure = failure_from_status(status, headers, message)
    if failure.kind == "fatal":
        return Polled("failed", failure=failure)
    return Polled("unknown", failure=failure)


def _failed(message: str) -> Polled:
    return Polled("failed", failure=ModelFailure(kind="fatal", message=message[:1000]))


# --- IO: the Responses API --------------------------------------------------------------------


class ResponsesBackground:
    """The OpenAI-compatible Responses API in background mode."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config

    async def submit(self, request: ModelRequest, timeout_s: float) -> Submitted | ModelFailure:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "input": responses_input(request.messages),
            "background": True,
            "store": True,  # the provider keeps background requests only when stored
        }
        if request.tools:
            body["tools"] = responses_tools(request.tools)
        try:
            reply = await self._call(lambda c: c.responses.create(**body), timeout_s)
        except _CallError as exc:
            return exc.failure
        if not isinstance(reply.get("id"), str) or not reply["id"]:
            return ModelFailure(kind="fatal", message="unusable model reply: no request id")
        # A server may answer a short request at once; the first poll then finds it complete.
        known: RequestStatus = "in_progress" if reply.get("status") == "in_progress" else "queued"
        return Submitted(Handle("responses", reply["id"]), known)

    async def poll(self, handle: Handle, timeout_s: float) -> Polled:
        return await self._status(lambda c: c.responses.retrieve(handle.id), timeout_s)

    async def cancel(self, handle: Handle, timeout_s: float) -> Polled:
        return await self._status(lambda c: c.responses.cancel(handle.id), timeout_s)

    async def _status(self, send: Any, timeout_s: float) -> Polled:
        try:
            return polled_from_body(await self._call(send, timeout_s), self.config.model)
        except _CallError as exc:
            return exc.polled

    async def _call(self, send: Any, timeout_s: float) -> dict[str, Any]:
        client = _client(self.config, timeout_s)
        try:
            reply = await asyncio.wait_for(send(client), timeout_s)
            return dict(reply.model_dump())
        except (TimeoutError, openai.APITimeoutError) as exc:
            failure = ModelFailure(kind="timeout", message=f"no model reply within {timeout_s:g} s")
            raise _CallError(failure, Polled("unknown", failure=failure)) from exc
        except openai.APIStatusError as exc:
            message = f"model endpoint answered {exc.status_code}: {exc.message}"[:1000]
            headers = dict(exc.response.headers) if exc.response is not None else {}
            raise _CallError(
                failure_from_status(exc.status_code, headers, message),
                polled_from_error(exc.status_code, headers, message),
            ) from exc
        except openai.APIConnectionError as exc:
            failure = ModelFailure(kind="transient", message=f"cannot reach the model: {exc}")
            raise _CallError(failure, Polled("unknown", failure=failure)) from exc
        finally:
            await client.close()


class _CallError(Exception):
    """One failed HTTP call, as a submit failure and as a poll outcome."""

    def __init__(self, failure: ModelFailure, polled: Polled) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.polled = polled


def _client(config: ProviderConfig, timeout_s: float) -> openai.AsyncOpenAI:
    # The same client as a synchronous call's: a key, or an Entra ID token (model_provider).
    return model_provider.openai_client(config, timeout_s)


# --- the offline planner as a background provider --------------------------------------------


class OfflineBackground:
    """The offline planner: answered at submit, the answer kept in the content store."""

    def __init__(self, store: ContentStore) -> None:
        self.store = store

    async def submit(self, request: ModelRequest, timeout_s: float) -> Submitted | ModelFailure:
        response = planner.plan(entries_from_messages(request.messages))
        text = json.dumps(response.to_dict(), sort_keys=True)
        ref = await asyncio.to_thread(self.store.put, text)
        return Submitted(Handle("offline", OFFLINE_PREFIX + ref), "queued")

    async def poll(self, handle: Handle, timeout_s: float) -> Polled:
        try:
            text = await asyncio.to_thread(self.store.get, handle.id.removeprefix(OFFLINE_PREFIX))
        except ContentNotFound:
            return _failed(f"the offline planner knows no request {handle.id!r}")
        return Polled("completed", response=ModelResponse.from_dict(json.loads(text)))

    async def cancel(self, handle: Handle, timeout_s: float) -> Polled:
        # The answer exists from the start: there is nothing to stop.
        return await self.poll(handle, timeout_s)


def entries_from_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages back into the session entries the offline planner reads."""
    entries = []
    for n, message in enumerate(messages, start=1):
        data: dict[str, Any] = {}
        if message.get("tool_call_id"):
            data["tool_call_id"] = message["tool_call_id"]
        entries.append(
            {"n": n, "role": message["role"], "text": message.get("content"), "data": data}
        )
    return entries


def provider_for(config: ProviderConfig | None, store: ContentStore) -> BackgroundProvider:
    """The Responses API when an endpoint is configured, else the offline planner."""
    return OfflineBackground(store) if config is None else ResponsesBackground(config)


def provider_of(
    handle: Handle, config: ProviderConfig | None, store: ContentStore
) -> BackgroundProvider | None:
    """The provider that holds ``handle`` (a handle outlives a change of settings only if its
    provider is still configured: an offline handle needs no endpoint, a Responses one does)."""
    if handle.provider == "offline":
        return OfflineBackground(store)
    if config is None:
        return None
    return ResponsesBackground(config)
