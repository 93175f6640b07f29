"""What the HTTP side accepts: body sizes, read speed, JSON shape, query integers.

Every request body the host reads goes through ``read_body``: a declared
``Content-Length`` over the limit is refused before a byte is read, a body without one is
counted while it streams and refused as soon as it passes the limit, and a body that
stops arriving (no byte for ``body_idle_timeout``) or trickles in below ``body_min_rate``
after a grace period is answered 408. Nothing is buffered beyond the limit.

Every JSON body the host itself decodes (orchestration inputs, event payloads, entity
operation inputs: the management webhooks and the SDK's RPC share them) goes through
``json_text``: valid UTF-8 JSON, at most ``max_json_depth`` levels of arrays and objects,
no ``NaN``/``Infinity``, no number that overflows a double and no ``\\uD800``-style escape
of a lone surrogate (I-JSON, RFC 7493: such a string has no UTF-8 form, so any consumer
that writes it as UTF-8 fails later, far from the request). A refusal is a
``ClientError`` (4xx with a JSON body naming the problem), raised before anything is
stored. Large bodies are parsed on a worker thread so the event loop keeps answering.

The limits come from the environment once (``Limits.from_env``); ``docs/reliability.md``
explains the defaults.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from durable_host.engine.client import INVALID_JSON, ClientError
from durable_host.functions.config import ConfigError

MIB = 1024 * 1024
_OFF_LOOP_BYTES = 64 * 1024  # parse bodies above this on a thread
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True, slots=True)
class Limits:
    max_request_bytes: int = 16 * MIB  # the app's HTTP functions
    max_input_bytes: int = 4 * MIB  # inputs the host stores: starts, events, entity operations
    max_json_depth: int = 64
    # Idle connection, or request headers not complete. Longer than the SDK client's
    # keep-alive (aiohttp's 15 s): the client must drop an idle connection first, or a
    # request sent as the host closes it would fail.
    header_timeout: float = 30.0
    body_idle_timeout: float = 10.0  # no byte of the body for this long
    body_min_rate: float = 1024.0  # bytes per second, averaged, after body_grace
    body_grace: float = 10.0
    max_connections: int = 0  # 0: half the process's file descriptor limit, at most 1,000
    max_query_int: int = 2**31 - 1  # top, as the extension's int.TryParse reads it

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Limits:
        env = os.environ if environ is None else environ
        default = cls()
        values: dict[str, Any] = {}
        for name, key in _SETTINGS.items():
            text = env.get(key)
            if text is None or not text.strip():
                continue
            kind = type(getattr(default, name))
            try:
                value = kind(text.strip())
            except ValueError as exc:
                raise ConfigError(f"{key}={text!r} must be a number") from exc
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{key}={text!r} must be a positive finite number")
            values[name] = value
        return cls(**values)


_SETTINGS = {
    "max_request_bytes": "DURABLE_HOST_MAX_REQUEST_BYTES",
    "max_input_bytes": "DURABLE_HOST_MAX_INPUT_BYTES",
    "max_json_depth": "DURABLE_HOST_MAX_JSON_DEPTH",
    "header_timeout": "DURABLE_HOST_HEADER_TIMEOUT",
    "body_idle_timeout": "DURABLE_HOST_BODY_TIMEOUT",
    "max_connections": "DURABLE_HOST_MAX_CONNECTIONS",
}


def too_large(limit: int, what: str) -> ClientError:
    return ClientError(413, f"The {what} exceeds the limit of {limit} bytes.", message_only=True)


async def read_body(request: web.Request, limit: int, what: str, limits: Limits) -> bytes:
    """The whole body, refused with 413 over ``limit`` and 408 when it stalls or trickles."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise too_large(limit, what)
    chunks: list[bytes] = []
    size = 0
    started = time.monotonic()
    stream = request.content
    while True:
        try:
            async with asyncio.timeout(limits.body_idle_timeout):
                chunk = await stream.readany()
        except TimeoutError as exc:
            raise _slow(what) from exc
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise too_large(limit, what)
        chunks.append(chunk)
        elapsed = time.monotonic() - started
        if elapsed > limits.body_grace and size / elapsed < limits.body_min_rate:
            raise _slow(what)
    return b"".join(chunks)


def _slow(what: str) -> ClientError:
    text = f"The {what} arrived too slowly; send it at once."
    return ClientError(408, text, message_only=True)


async def json_text(body: bytes, what: str, limits: Limits) -> str | None:
    """``body`` as the JSON text to store (None when empty), once it passed every bound."""
    if not body.strip():
        return None
    if len(body) > _OFF_LOOP_BYTES:
        return await asyncio.to_thread(check_json, body, what, limits.max_json_depth)
    return check_json(body, what, limits.max_json_depth)


def check_json(body: bytes, what: str, max_depth: int) -> str:
    """The decoded text of ``body`` if it is bounded JSON; a 400 ``ClientError`` otherwise."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
        if _SURROGATE_ESCAPE.search(text):  # rare: pay for the exact check only then
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ClientError(
            400,
            f"The {what} holds a lone surrogate (a \\uD800-\\uDFFF escape without its pair).",
            "Newtonsoft.Json.JsonReaderException",
            title=INVALID_JSON,
        ) from exc
    except RecursionError as exc:
        raise _too_deep(what, max_depth) from exc
    except ValueError as exc:
        raise ClientError(
            400,
            f"The {what} is not valid JSON: {exc}",
            "Newtonsoft.Json.JsonReaderException",
            title=INVALID_JSON,
        ) from exc
    if json_depth(text, max_depth) > max_depth:
        raise _too_deep(what, max_depth)
    return text


def json_depth(text: str, limit: int) -> int:
    """Nesting depth of valid JSON ``text`` if at most ``limit`` (or a bound of it that is
    itself at most ``limit``); ``limit + 1`` when deeper.

    Without recursion and at C speed: strings go, only brackets stay, and each pass of
    ``replace`` removes the innermost empty pairs, one level per pass.
    """
    if text.count("[") + text.count("{") <= limit:
        return min(text.count("[") + text.count("{"), limit)
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    brackets = brackets.replace("{", "[").replace("}", "]")
    for depth in range(limit + 1):
        if not brackets:
            return depth
        brackets = brackets.replace("[]", "")
    return limit + 1


def _too_deep(what: str, max_depth: int) -> ClientError:
    return ClientError(
        400,
        f"The {what} nests arrays and objects deeper than {max_depth} levels.",
        "Newtonsoft.Json.JsonReaderException",
        title=INVALID_JSON,
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def query_int(request: web.Request, name: str, low: int, high: int) -> int | None:
    """An integer query value within ``[low, high]``; a 400 naming it otherwise."""
    text = request.query.get(name)
    if text is None or not text.strip():
        return None
    stripped = text.strip()
    if not re.fullmatch(r"[+-]?\d{1,19}", stripped):
        raise ClientError(400, f"{name}={text[:40]!r} must be an integer from {low} to {high}.")
    value = int(stripped)
    if not low <= value <= high:
        raise ClientError(400, f"{name}={text[:40]!r} must be an integer from {low} to {high}.")
    return value
