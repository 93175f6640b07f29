"""The OpenAI-compatible model provider: one chat-completions call, every failure as an envelope.

Configuration (app settings, read by ``ProviderConfig.from_settings``):

=============================  ============================================================
``AGENT_MODEL_BASE_URL``       the endpoint, e.g. ``https://api.openai.com/v1`` or a local
                               OpenAI-compatible server; unset or blank: no provider (the
                               offline planner answers instead)
``AGENT_MODEL_API_KEY``        the key (optional for local servers)
``AGENT_MODEL_AUTH``           ``key`` (the default: the key above) or ``entra``: a
                               Microsoft Entra ID bearer token instead of a key (Azure
                               OpenAI without keys), see below
``AGENT_MODEL_TOKEN_SCOPE``    ``entra``: the token's scope (default
                               ``https://cognitiveservices.azure.com/.default``)
``AGENT_MODEL_NAME``           the model, or for Azure OpenAI the deployment name
``AGENT_MODEL_API_VERSION``    Azure OpenAI: set it to send ``api-version`` with every call
                               and the key as the ``api-key`` header; the base URL is then
                               ``https://<resource>.openai.azure.com/openai/deployments/<name>``
=============================  ============================================================

With ``AGENT_MODEL_AUTH=entra`` every request carries ``Authorization: Bearer <token>`` and no
``api-key``; the token comes from the credential of the app's storage connection
(``AzureWebJobsStorage__credential=managedidentity`` and ``__clientId``: the Function app's
managed identity; otherwise the Azure credential chain: environment, workload identity,
managed identity, Azure CLI), cached and refreshed by ``azure-identity`` before it expires. A
token that cannot be had is a ``transient`` failure (retried by the orchestrator's timers, like
an unreachable model); a token the endpoint refuses (401) is ``fatal``, never retried. The
choice of an explicit setting over "no key with an Azure endpoint": see docs/architecture.md.

``complete(config, request, timeout_s, on_text=None)`` returns a ``kernel.turn.model_io`` envelope
and never raises for provider trouble: 429 becomes ``rate_limited`` with the provider's ``Retry-After``
(seconds or an HTTP date, or ``retry-after-ms``); 408, 409, 5xx and connection errors become
``transient``; a call that outlives ``timeout_s`` becomes ``timeout``; any other 4xx and an
unusable reply become ``fatal``. The client never retries by itself (``max_retries=0``): retries
are durable timers in the orchestrator, so a crash between attempts loses nothing.

Streaming: with ``on_text`` the call asks for a streamed reply (``stream: true`` with
``stream_options.include_usage``), calls ``on_text(text so far)`` whenever the text grows, and
folds the chunks (``StreamAccumulator``) into the same reply a plain call returns, so the
result - what enters a history - is the same either way. ``on_text`` is for previews only: it
must not block, and what it is given is never a result. A stream cut off before its end is a
``transient`` failure like a lost connection; the partial text is dropped with it.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from kernel.turn.model_io import (
    JsonObject,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    ModelResult,
    ModelSuccess,
    ToolCall,
    Usage,
)

_TRANSIENT_STATUSES = frozenset({408, 409})
ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"


class ModelSettingError(ValueError):
    """An ``AGENT_MODEL_*`` setting that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    base_url: str
    api_key: str
    model: str
    api_version: str | None = None
    auth: Literal["key", "entra"] = "key"
    token_scope: str = ENTRA_SCOPE
    # entra: the storage connection's identity (``AzureWebJobsStorage__credential`` / ``__clientId``)
    managed_identity: bool = False
    client_id: str | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> ProviderConfig | None:
        base_url = (settings.get("AGENT_MODEL_BASE_URL") or "").strip()
        if not base_url:
            return None
        auth = (settings.get("AGENT_MODEL_AUTH") or "").strip().lower() or "key"
        if auth not in ("key", "entra"):
            raise ModelSettingError(f"AGENT_MODEL_AUTH must be 'key' or 'entra', not {auth!r}")
        api_key = (settings.get("AGENT_MODEL_API_KEY") or "").strip()
        if auth == "entra" and api_key:
            raise ModelSettingError(
                "AGENT_MODEL_AUTH=entra sends a Microsoft Entra ID token, not a key: remove"
                " AGENT_MODEL_API_KEY (or set AGENT_MODEL_AUTH=key)"
            )
        return cls(
            base_url=base_url,
            # Local servers need no key, but the client insists on one.
            api_key=api_key or "not-needed",
            model=(settings.get("AGENT_MODEL_NAME") or "").strip() or "gpt-4o-mini",
            api_version=(settings.get("AGENT_MODEL_API_VERSION") or "").strip() or None,
            auth=auth,  # type: ignore[arg-type]
            token_scope=(settings.get("AGENT_MODEL_TOKEN_SCOPE") or "").strip() or ENTRA_SCOPE,
            managed_identity=_setting(settings, "AzureWebJobsStorage__credential").lower()
            == "managedidentity",
            client_id=_setting(settings, "AzureWebJobsStorage__clientId") or None,
        )


def _setting(settings: Mapping[str, str], name: str) -> str:
    """A setting by name, ignoring case as the Functions host does for connection parts."""
    for key, value in settings.items():
        if key.lower() == name.lower():
            return value.strip()
    return ""


TextSink = Callable[[str], None]


async def complete(
    config: ProviderConfig,
    request: ModelRequest,
    timeout_s: float,
    on_text: TextSink | None = None,
) -> ModelResult:
    """One chat-completions call as an envelope; see the module docstring."""
    client = openai_client(config, timeout_s)
    try:
        kwargs: dict[str, Any] = {
            "model": request.model or config.model,
            "messages": list(request.messages),
        }
        if request.tools:
            kwargs["tools"] = list(request.tools)
        # The client's own timeout covers each socket step; this bounds the whole call.
        if on_text is None:
            reply = await asyncio.wait_for(client.chat.completions.create(**kwargs), timeout_s)
            return ModelSuccess(response_from_openai(reply.model_dump(), config.model))
        streamed = await asyncio.wait_for(_streamed(client, kwargs, on_text), timeout_s)
        return ModelSuccess(response_from_openai(streamed, config.model))
    except (TimeoutError, openai.APITimeoutError):
        return ModelFailure(kind="timeout", message=f"no model reply within {timeout_s:g} s")
    except openai.APIStatusError as exc:
        return failure_from_status(exc.status_code, _headers(exc), _describe(exc))
    except openai.APIConnectionError as exc:
        return ModelFailure(kind="transient", message=f"cannot reach the model: {exc}")
    except (openai.APIError, StreamCutError) as exc:
        # An error event inside a stream, or a stream that broke off: nothing was received.
        return ModelFailure(kind="transient", message=f"the model stream broke off: {exc}")
    except (ValueError, KeyError, TypeError) as exc:
        return ModelFailure(kind="fatal", message=f"unusable model reply: {exc}")
    finally:
        await client.close()


class StreamCutError(Exception):
    """A stream that ended without a finish reason: the reply is incomplete."""


async def _streamed(
    client: openai.AsyncOpenAI, kwargs: dict[str, Any], on_text: TextSink
) -> dict[str, Any]:
    stream = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    folded = StreamAccumulator()
    try:
        async for chunk in stream:
            if folded.add(chunk.model_dump()):
                on_text(folded.text)
    except openai.APIError:
        raise
    except Exception as exc:  # the transport's own errors: the connection broke mid-stream
        raise StreamCutError(f"{type(exc).__name__}: {exc}") from exc
    return folded.reply()


@dataclass(slots=True)
class StreamAccumulator:
    """The chunks of a streamed chat completion folded into the reply dict of a plain call.

    ``add(chunk)`` takes one chunk (as a dict) and says whether the text grew; ``reply()`` is
    the whole reply once the stream ended (``StreamCutError`` without a finish reason). Only
    choice 0 is read, as for a plain reply. Tool calls are assembled by their ``index``: the
    first delta brings the id and the name, later ones append to the arguments."""

    model: str | None = None
    parts: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, chunk: Mapping[str, Any]) -> bool:
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
        grew = False
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.parts.append(delta["content"])
                grew = True
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return grew

    def _add_call(self, delta: Mapping[str, Any]) -> None:
        call = self.calls.setdefault(
            int(delta.get("index") or 0),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["function"]["name"] = function.get("name") or call["function"]["name"]
        call["function"]["arguments"] += function.get("arguments") or ""

    def reply(self) -> dict[str, Any]:
        if self.finish_reason is None:
            raise StreamCutError("the stream ended without a finish reason")
        calls = [self.calls[i] for i in sorted(self.calls)]
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }


def failure_from_status(status: int, headers: Mapping[str, str], message: str) -> ModelFailure:
    """Map an HTTP error status (and its headers) to a failure envelope."""
    if status == 429:
        return ModelFailure(kind="rate_limited", message=message, retry_after=retry_after(headers))
    if status >= 500 or status in _TRANSIENT_STATUSES:
        return ModelFailure(kind="transient", message=message)
    return ModelFailure(kind="fatal", message=message)


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the provider asks us to wait, from ``retry-after-ms`` or ``Retry-After``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    value = lowered.get("retry-after")
    if value is None or not value.strip():
        return None
    seconds = _number(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def response_from_openai(reply: Mapping[str, Any], default_model: str) -> ModelResponse:
    """A chat-completions reply (as a dict) in the neutral shape."""
    choice = reply["choices"][0]
    message = choice["message"]
    calls = tuple(
        ToolCall(
            id=call["id"],
            name=call["function"]["name"],
            arguments=tool_arguments(call["function"].get("arguments")),
        )
        for call in message.get("tool_calls") or ()
    )
    usage = reply.get("usage") or {}
    return ModelResponse(
        content=message.get("content"),
        tool_calls=calls,
        usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
        finish_reason=choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
        model=reply.get("model") or default_model,
    )


def tool_arguments(raw: object) -> JsonObject:
    """A tool call's arguments as a JSON object, whatever the model sent."""
    # A model may send arguments that are not a JSON object; the tool's validation reports it
    # to the model instead of the turn failing here.
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {"unparsed_arguments": str(raw)[:2000]}
    return value if isinstance(value, dict) else {"unparsed_arguments": str(raw)[:2000]}


def openai_client(config: ProviderConfig, timeout_s: float) -> openai.AsyncOpenAI:
    """The OpenAI client for ``config``: a key, or an Entra ID token per request (``entra``)."""
    extra: dict[str, Any] = {}
    api_key: Any = config.api_key
    if config.auth == "entra":
        api_key = _entra_token(config)
    if config.api_version is not None:
        extra["default_query"] = {"api-version": config.api_version}
        if config.auth == "key":
            extra["default_headers"] = {"api-key": config.api_key}
    # Retries are durable timers in the orchestrator, never the client's own.
    return openai.AsyncOpenAI(
        base_url=config.base_url, api_key=api_key, timeout=timeout_s, max_retries=0, **extra
    )


def _entra_token(config: ProviderConfig) -> Callable[[], Awaitable[str]]:
    """An async token source for the client: the process's credential (its cache refreshes the
    token before it expires), asked on a worker thread so no event loop owns it."""
    import httpx2

    from functions_connections import IdentityUnavailableError, credential, token_provider

    source = token_provider(
        credential(managed_identity=config.managed_identity, client_id=config.client_id),
        config.token_scope,
    )

    async def token() -> str:
        try:
            return await asyncio.to_thread(source)
        except IdentityUnavailableError as exc:
            # No token yet is like no connection yet: transient, retried by durable timers.
            raise openai.APIConnectionError(
                message=f"no Microsoft Entra ID token for the model: {exc}",
                request=httpx2.Request("POST", config.base_url),
            ) from exc

    return token


def _headers(exc: openai.APIStatusError) -> Mapping[str, str]:
    return dict(exc.response.headers) if exc.response is not None else {}


def _describe(exc: openai.APIStatusError) -> str:
    return f"model endpoint answered {exc.status_code}: {exc.message}"[:1000]
