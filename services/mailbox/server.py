"""HTTP face of the mailbox (aiohttp.web): JSON in, JSON out, decisions delegated to `rules`.

Contract:
- Every error body is `{"error", "message", "field"}`; bad input changes nothing.
- `POST /messages` commits before it answers; with `delay_after_commit` it commits, then waits,
  which is the deterministic "accepted but receipt not yet returned" window.
- An outage (`down_for`) refuses every route except `/control`, `/log` and `/stats`, so a test
  can always end it and inspect what happened.
- Fault settings live in memory only: a restarted mailbox has no faults but all its data.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from services.mailbox.rules import (
    Faults,
    Invalid,
    Refusal,
    SendRequest,
    apply_control,
    down_refusal,
    parse_key,
    parse_send,
    take_failure,
)
from services.mailbox.store import MailStore

# Above the 64 KiB body limit with room for JSON escapes, so an over-long body gets the precise
# "body" error rather than a generic 413.
MAX_REQUEST_BYTES = 1024 * 1024
ALWAYS_UP = frozenset({"/control", "/log", "/stats"})
_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class State:
    store: MailStore
    clock: Callable[[], float]
    faults: Faults = field(default_factory=Faults)


STATE = web.AppKey("state", State)


def create_app(store: MailStore, clock: Callable[[], float] = time.monotonic) -> web.Application:
    app = web.Application(middlewares=[_errors_as_json, _outage], client_max_size=MAX_REQUEST_BYTES)
    app[STATE] = State(store, clock)
    app.router.add_get("/health", _health)
    app.router.add_post("/messages", _send)
    app.router.add_get("/messages", _list_or_query)
    app.router.add_get("/messages/{message_id}", _get_message)
    app.router.add_get("/log", _log)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/control", _get_control)
    app.router.add_post("/control", _post_control)
    return app


def error(status: int, code: str, message: str, field_name: str | None = None) -> web.Response:
    body = {"error": code, "message": message, "field": field_name}
    return web.json_response(body, status=status)


def _refused(refusal: Refusal) -> web.Response:
    response = error(refusal.status, refusal.code, "refused by an injected fault")
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = str(refusal.retry_after)
    return response


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Invalid as exc:
        return error(400, exc.code, exc.message, exc.field)
    except web.HTTPException as exc:
        # the router's 404/405 and the body-size 413 would otherwise be plain text
        if exc.status < 400:
            raise
        return error(exc.status, _CODES.get(exc.status, "http_error"), exc.reason)


@web.middleware
async def _outage(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = request.app[STATE]
    refusal = None if request.path in ALWAYS_UP else down_refusal(state.faults, state.clock())
    if refusal is None:
        return await handler(request)
    if request.method == "POST" and request.path == "/messages":
        state.store.record("failure", _key_or_none(request), None)
    return _refused(refusal)


async def _read_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise Invalid("invalid_json", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise Invalid("invalid_body", "the body must be a JSON object")
    return data


def _key_or_none(request: web.Request) -> str | None:
    try:
        return parse_key(request.headers.get("Idempotency-Key"))
    except Invalid:
        return None


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _send(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.faults, refusal = take_failure(state.faults)
    if refusal is not None:
        state.store.record("failure", _key_or_none(request), None)
        return _refused(refusal)
    send = parse_send(request.headers.get("Idempotency-Key"), await _read_object(request))
    if state.faults.delay_ms and not state.faults.delay_after_commit:
        await _pause(state, send)
    # a key that was already accepted keeps its answer even if its recipient is rejected later
    already_accepted = state.store.find_by_operation(send.operation_id) is not None
    if state.faults.is_rejected(send.to) and not already_accepted:
        state.store.record("rejected", send.operation_id, send.to)
        return error(422, "recipient_rejected", f"{send.to} does not accept mail", "to")
    outcome, message = state.store.accept(send)
    if outcome == "conflict":
        return error(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different payload",
            "Idempotency-Key",
        )
    if state.faults.delay_ms and state.faults.delay_after_commit:
        await _pause(state, send)
    receipt = {key: message[key] for key in ("messageId", "operationId", "to", "acceptedAt")}
    receipt["replayed"] = outcome == "replayed"
    return web.json_response(receipt, status=201 if outcome == "delivered" else 200)


async def _pause(state: State, send: SendRequest) -> None:
    # logged before sleeping, so the log already shows the delay while the caller waits
    state.store.record("delayed", send.operation_id, send.to)
    await asyncio.sleep(state.faults.delay_ms / 1000)


async def _list_or_query(request: web.Request) -> web.Response:
    store = request.app[STATE].store
    for name in request.query:
        if name != "operationId":
            raise Invalid("unknown_parameter", f"unknown query parameter {name!r}", name)
    if "operationId" not in request.query:
        return web.json_response({"messages": store.messages()})
    operation_id = parse_key(request.query["operationId"], "operationId")
    message = store.query(operation_id)
    if message is None:
        return web.json_response({"operationId": operation_id, "found": False})
    return web.json_response({"operationId": operation_id, "found": True, "message": message})


async def _get_message(request: web.Request) -> web.Response:
    message = request.app[STATE].store.get(request.match_info["message_id"])
    if message is None:
        return error(404, "not_found", "no message with this id", "messageId")
    return web.json_response(message)


async def _log(request: web.Request) -> web.Response:
    return web.json_response({"entries": request.app[STATE].store.log()})


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].store.stats())


async def _get_control(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response(state.faults.describe(state.clock()))


async def _post_control(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.faults = apply_control(state.faults, await _read_object(request), state.clock())
    return web.json_response(state.faults.describe(state.clock()))
