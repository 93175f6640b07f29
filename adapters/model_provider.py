"""The OpenAI-compatible model provider: one chat-completions call, every failure as an envelope.

Configuration (app settings, read by ``ProviderConfig.from_settings``):

=============================  ============================================================
``AGENT_MODEL_BASE_URL``       the endpoint, e.g. ``https://api.openai.com/v1`` or a local
                               OpenAI-compatible server; unset or blank: no provider (the
                               offline planner answers instead)
``AGENT_MODEL_API_KEY``        the key (optional for local servers)
``AGENT_MODEL_NAME``           the model, or for Azure OpenAI the deployment name
``AGENT_MODEL_API_VERSION``    Azure OpenAI: set it to send ``api-version`` with every call
                               and the key as the ``api-key`` header; the base URL is then
                               ``https://<resource>.openai.azure.com/openai/deployments/<name>``
=============================  ============================================================

``complete(config, request, timeout_s)`` returns a ``kernel.model_io`` envelope and never
raises for provider trouble: 429 becomes ``rate_limited`` with the provider's ``Retry-After``
(seconds or an HTTP date, or ``retry-after-ms``); 408, 409, 5xx and connection errors become
``transient``; a call that outlives ``timeout_s`` becomes ``timeout``; any other 4xx and an
unusable reply become ``fatal``. The client never retries by itself (``max_retries=0``): retries
are durable timers in the orchestrator, so a crash between attempts loses nothing.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import openai

from kernel.model_io import (
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


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    base_url: str
    api_key: str
    model: str
    api_version: str | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> ProviderConfig | None:
        base_url = (settings.get("AGENT_MODEL_BASE_URL") or "").strip()
        if not base_url:
            return None
        return cls(
            base_url=base_url,
            # Local servers need no key, but the client insists on one.
            api_key=(settings.get("AGENT_MODEL_API_KEY") or "").strip() or "not-needed",
            model=(settings.get("AGENT_MODEL_NAME") or "").strip() or "gpt-4o-mini",
            api_version=(settings.get("AGENT_MODEL_API_VERSION") or "").strip() or None,
        )


async def complete(config: ProviderConfig, request: ModelRequest, timeout_s: float) -> ModelResult:
    """One chat-completions call as an envelope; see the module docstring."""
    client = _client(config, timeout_s)
    try:
        kwargs: dict[str, Any] = {
            "model": request.model or config.model,
            "messages": list(request.messages),
        }
        if request.tools:
            kwargs["tools"] = list(request.tools)
        # The client's own timeout covers each socket step; this bounds the whole call.
        reply = await asyncio.wait_for(client.chat.completions.create(**kwargs), timeout_s)
        return ModelSuccess(response_from_openai(reply.model_dump(), config.model))
    except (TimeoutError, openai.APITimeoutError):
        return ModelFailure(kind="timeout", message=f"no model reply within {timeout_s:g} s")
    except openai.APIStatusError as exc:
        return failure_from_status(exc.status_code, _headers(exc), _describe(exc))
    except openai.APIConnectionError as exc:
        return ModelFailure(kind="transient", message=f"cannot reach the model: {exc}")
    except (ValueError, KeyError, TypeError) as exc:
        return ModelFailure(kind="fatal", message=f"unusable model reply: {exc}")
    finally:
        await client.close()


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
            arguments=_arguments(call["function"].get("arguments")),
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


def _arguments(raw: object) -> JsonObject:
    # A model may send arguments that are not a JSON object; the tool's validation reports it
    # to the model instead of the turn failing here.
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {"unparsed_arguments": str(raw)[:2000]}
    return value if isinstance(value, dict) else {"unparsed_arguments": str(raw)[:2000]}


def _client(config: ProviderConfig, timeout_s: float) -> openai.AsyncOpenAI:
    if config.api_version is None:
        return openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key, timeout=timeout_s, max_retries=0
        )
    return openai.AsyncOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        timeout=timeout_s,
        max_retries=0,
        default_query={"api-version": config.api_version},
        default_headers={"api-key": config.api_key},
    )


def _headers(exc: openai.APIStatusError) -> Mapping[str, str]:
    return dict(exc.response.headers) if exc.response is not None else {}


def _describe(exc: openai.APIStatusError) -> str:
    return f"model endpoint answered {exc.status_code}: {exc.message}"[:1000]
