"""The Durable extension's HTTP management API (webhooks and the SDK's local RPC).

The same handler serves ``/runtime/webhooks/durabletask/...`` (what users and tools
call) and ``/durabletask/...`` (the ``rpcBaseUrl`` the SDK's client calls). Status codes,
headers and error bodies follow the extension's ``HttpApiHandler``; every body is empty
or JSON, because the SDK parses every response as JSON. Where the extension silently
ignores a malformed query value (``top=abc``, an unknown ``runtimeStatus``, a date it
cannot parse) this host answers 400 naming it instead. Bodies and JSON are bounded by
``limits`` (size, read speed, depth, numbers); ``top`` must be a 32-bit count.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from durable_host.core import history as h
from durable_host.core import wire
from durable_host.core.records import TERMINAL, Query, RuntimeStatus
from durable_host.engine.client import ClientError, DurableClient
from durable_host.http import limits
from durable_host.http.limits import Limits, json_text, query_int, read_body

WEBHOOK_BASE = "/runtime/webhooks/durabletask"
RPC_BASE = "/durabletask"
RUNTIME_STATUSES: tuple[str, ...] = (  # in the order the 400 answer lists them
    RuntimeStatus.RUNNING,
    RuntimeStatus.COMPLETED,
    RuntimeStatus.CONTINUED_AS_NEW,
    RuntimeStatus.FAILED,
    RuntimeStatus.CANCELED,
    RuntimeStatus.TERMINATED,
    RuntimeStatus.PENDING,
    RuntimeStatus.SUSPENDED,
)


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )


def error_response(error: ClientError) -> web.Response:
    if error.status == 404 and not error.message:
        return web.Response(status=404)
    return json_response(error.body(), error.status)


def management_urls(
    base: str, hub: str, instance_id: str, code: str | None = None
) -> dict[str, str]:
    """The check-status links. ``base`` is the host's configured public address, never the
    request's ``Host`` header (a client could name any origin there); ``code`` is the
    Durable system key when auth is on, as the extension adds it."""
    q = f"taskHub={hub}&connection=Storage" + (f"&code={quote(code, safe='')}" if code else "")
    i = quote(instance_id, safe="")
    root = f"{base}{WEBHOOK_BASE}/instances/{i}"
    return {
        "id": instance_id,
        "statusQueryGetUri": f"{root}?{q}",
        "sendEventPostUri": f"{root}/raiseEvent/{{eventName}}?{q}",
        "terminatePostUri": f"{root}/terminate?reason={{text}}&{q}",
        "rewindPostUri": f"{root}/rewind?reason={{text}}&{q}",
        "purgeHistoryDeleteUri": f"{root}?{q}",
        "restartPostUri": f"{root}/restart?{q}",
        "suspendPostUri": f"{root}/suspend?reason={{text}}&{q}",
        "resumePostUri": f"{root}/resume?reason={{text}}&{q}",
    }


def _flag(request: web.Request, name: str, default: bool) -> bool:
    """A boolean query value as .NET's ``bool.TryParse`` reads it (``True``/``false``...)."""
    value = request.query.get(name)
    if value is None or value.strip() == "":
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ClientError(400, f"The query parameter {name}={value!r} must be true or false.")
    return text == "true"


class ManagementApi:
    def __init__(
        self,
        client: DurableClient,
        hub: str,
        public_base: Callable[[], str],
        link_code: Callable[[], str | None] = lambda: None,
        limits: Limits | None = None,
    ):
        self.client = client
        self.hub = hub
        self.public_base = public_base
        self.link_code = link_code
        self.limits = limits or Limits()

    async def _json_input(self, request: web.Request, what: str) -> str | None:
        """The body as bounded JSON text (None when empty): sized, timed, shaped."""
        body = await read_body(request, self.limits.max_input_bytes, what, self.limits)
        return await json_text(body, what, self.limits)

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        parts = [p for p in path.split("/") if p != ""]
        try:
            return await self._route(request, parts)
        except ClientError as error:
            return error_response(error)

    async def _route(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        method = request.method
        head = parts[0] if parts else ""
        if head == "orchestrators" and len(parts) in (2, 3) and method == "POST":
            return await self._start(request, parts[1], parts[2] if len(parts) == 3 else None)
        if head == "instances" and len(parts) == 1:
            if method == "GET":
                return await self._query(request)
            if method == "DELETE":
                return await self._purge_many(request)
        if head == "instances" and len(parts) == 2:
            if method == "GET":
                return await self._status(request, parts[1])
            if method == "DELETE":
                return await self._purge(parts[1])
        if head == "instances" and len(parts) >= 3 and method == "POST":
            return await self._instance_action(request, parts[1], parts[2:])
        if head == "entities" and len(parts) in (2, 3):
            return await self._entities(request, parts[1:])
        return json_response({"Message": f"No route matches {method} {request.path}"}, 404)

    # --- orchestrations ---

    async def _start(
        self, request: web.Request, name: str, instance_id: str | None
    ) -> web.Response:
        input_json = await self._json_input(request, "request body")
        version = request.query.get("version")
        waiting = _wait_options(request)
        new_id = await self.client.start(name, instance_id, input_json, version)
        return await self._answer(request, new_id, waiting)

    async def _answer(
        self, request: web.Request, instance_id: str, waiting: tuple[float, float] | None
    ) -> web.Response:
        if waiting is None:
            return self.check_status_response(request, instance_id)
        return await self._wait(request, instance_id, *waiting)

    def check_status_response(self, request: web.Request, instance_id: str) -> web.Response:
        urls = management_urls(self.public_base(), self.hub, instance_id, self.link_code())
        payload = {"id": instance_id, **{k: v for k, v in urls.items() if k != "id"}}
        headers = {"Location": urls["statusQueryGetUri"], "Retry-After": "10"}
        return json_response(payload, 202, headers)

    async def _wait(
        self, request: web.Request, instance_id: str, timeout: float, interval: float
    ) -> web.Response:
        deadline = time.monotonic() + timeout
        step = max(0.05, interval)
        while time.monotonic() < deadline:
            status = await self.client.status(instance_id)
            if status and status["runtimeStatus"] == RuntimeStatus.COMPLETED:
                return json_response(status["output"], 200)
            if status and status["runtimeStatus"] in TERMINAL:
                return json_response(status, 200)
            await asyncio.sleep(min(step, max(0.0, deadline - time.monotonic())))
        return self.check_status_response(request, instance_id)

    async def _status(self, request: web.Request, instance_id: str) -> web.Response:
        status = await self.client.status(
            instance_id,
            show_input=_flag(request, "showInput", True),
            show_history=_flag(request, "showHistory", False),
            show_history_output=_flag(request, "showHistoryOutput", False),
        )
        if status is None:
            return web.Response(status=404)
        running = status["runtimeStatus"] not in TERMINAL
        failed = status["runtimeStatus"] == RuntimeStatus.FAILED
        if failed and _flag(request, "returnInternalServerErrorOnFailure", False):
            return json_response(status, 500)
        if running:
            headers = {"Location": self.public_base() + str(request.rel_url), "Retry-After": "5"}
            return json_response(status, 202, headers)
        return json_response(status, 200)

    async def _query(self, request: web.Request) -> web.Response:
        query = parse_query(request, max_top=self.limits.max_query_int)
        statuses, token = await self.client.query(query, _flag(request, "showInput", True))
        headers = {"x-ms-continuation-token": token} if token else None
        return json_response(statuses, 200, headers)

    async def _purge(self, instance_id: str) -> web.Response:
        count = await self.client.purge(instance_id)
        if count == 0:
            return web.Response(status=404)
        return json_response({"instancesDeleted": count})

    async def _purge_many(self, request: web.Request) -> web.Response:
        if not request.query.get("createdTimeFrom"):
            raise ClientError(
                400, "Please provide value for 'createdTimeFrom' parameter.", plain=True
            )
        query = parse_query(request)
        count = await self.client.purge_many(query)
        if count == 0:
            return web.Response(status=404)
        return json_response({"instancesDeleted": count})

    async def _instance_action(
        self, request: web.Request, instance_id: str, rest: list[str]
    ) -> web.Response:
        action = rest[0].lower()  # the extension matches operations case-insensitively
        reason = request.query.get("reason")
        if action == "raiseevent" and len(rest) == 2:
            return await self._raise_event(request, instance_id, rest[1])
        if action == "restart" and len(rest) == 1:
            return await self._restart(request, instance_id)
        handlers = {
            "terminate": self.client.terminate,
            "suspend": self.client.suspend,
            "resume": self.client.resume,
            "rewind": self.client.rewind,
        }
        if action in handlers and len(rest) == 1:
            await handlers[action](instance_id, reason)
            return web.Response(status=202)
        return json_response({"Message": f"Unknown instance action '{rest[0]}'"}, 404)

    async def _raise_event(self, request: web.Request, instance_id: str, name: str) -> web.Response:
        # The extension checks the instance first (404/410), then the payload (400).
        await self.client.require_running(instance_id)
        if request.content_type.lower() != "application/json":
            text = "Only application/json request content is supported"
            raise ClientError(400, text, message_only=True)
        input_json = await self._json_input(request, "event payload")
        await self.client.raise_event(instance_id, name, input_json)
        return web.Response(status=202)

    async def _restart(self, request: web.Request, instance_id: str) -> web.Response:
        waiting = _wait_options(request)
        new_id_wanted = _flag(request, "restartWithNewInstanceId", True)
        new_id = await self.client.restart(instance_id, new_id_wanted)
        return await self._answer(request, new_id, waiting)

    # --- entities ---

    async def _entities(self, request: web.Request, parts: list[str]) -> web.Response:
        name = parts[0]
        if len(parts) == 1:
            if request.method != "GET":
                return json_response({"Message": "Use GET to list entities"}, 404)
            return await self._list_entities(request, name)
        key = "" if parts[1] == "$" else parts[1]
        if request.method == "GET":
            record = await self.client.read_entity(name, key)
            if record is None:
                return web.Response(status=404)
            return web.Response(text=record.entity_state or "null", content_type="application/json")
        if request.method in ("POST", "DELETE"):
            operation = "delete" if request.method == "DELETE" else request.query.get("op", "")
            input_json = await self._entity_input(request)
            await self.client.signal_entity(name, key, operation, input_json)
            return web.Response(status=202)
        return json_response({"Message": f"{request.method} is not supported here"}, 404)

    async def _list_entities(self, request: web.Request, name: str) -> web.Response:
        query = parse_query(request, entities=True, max_top=self.limits.max_query_int)
        page = await self.client.query_entities(name, query)
        fetch = _flag(request, "fetchState", False)
        rows = []
        for record in page.records:
            if not record.entity_exists:
                continue
            row: dict[str, Any] = {
                "entityId": {
                    "name": name.lower(),
                    "key": wire.split_entity_id(record.instance_id)[1],
                },
                "lastOperationTime": record.updated_at[:19] + "Z",
            }
            if fetch:
                row["state"] = wire.parse_stored(record.entity_state)
            rows.append(row)
        headers = {"x-ms-continuation-token": page.continuation} if page.continuation else None
        return json_response(rows, 200, headers)

    async def _entity_input(self, request: web.Request) -> str | None:
        what = "operation input"
        body = await read_body(request, self.limits.max_input_bytes, what, self.limits)
        if not body.strip():
            return None
        if request.content_type == "application/json":
            text = await json_text(body, what, self.limits)
            assert text is not None
            value = json.loads(text)  # bounded above: cannot recurse too deep
            # The SDK client sends JSON text inside a JSON string: unwrap one level, if the
            # inner text is itself bounded JSON (else it stays the string it is).
            return value if isinstance(value, str) and self._is_json(value) else text
        return json.dumps(body.decode("utf-8", errors="replace"))

    def _is_json(self, text: str) -> bool:
        try:
            limits.check_json(
                text.encode("utf-8", "surrogatepass"), "input", self.limits.max_json_depth
            )
        except ClientError:
            return False
        return True


def _wait_options(request: web.Request) -> tuple[float, float] | None:
    """``timeout``/``pollingInterval`` in seconds: the extension waits only when given both."""
    values: list[float] = []
    for name in ("timeout", "pollingInterval"):
        text = request.query.get(name)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError as exc:
            raise ClientError(400, f"{name}={text!r} must be a number of seconds.") from exc
        if not 0 <= value <= 3600:
            raise ClientError(400, f"{name}={text!r} must be between 0 and 3600 seconds.")
        values.append(value)
    return (values[0], values[1]) if len(values) == 2 else None


def _statuses(text: str) -> tuple[str, ...]:
    statuses = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in statuses if s not in RUNTIME_STATUSES]
    if unknown:
        raise ClientError(
            400, f"Unknown runtimeStatus {', '.join(unknown)}; use {', '.join(RUNTIME_STATUSES)}."
        )
    return statuses


def parse_query(
    request: web.Request, entities: bool | None = None, max_top: int = 2**31 - 1
) -> Query:
    """Query parameters -> Query. Instance queries list entities too (``@name@key`` ids),
    as the extension's do (its issue #1991)."""
    q = request.query
    top_value = query_int(request, "top", 0, max_top)
    statuses = _statuses(q.get("runtimeStatus", ""))
    return Query(
        created_from=_time_filter(q.get("createdTimeFrom")),
        created_to=_time_filter(q.get("createdTimeTo")),
        updated_from=_time_filter(q.get("lastOperationTimeFrom")),
        updated_to=_time_filter(q.get("lastOperationTimeTo")),
        statuses=statuses,
        prefix=q.get("instanceIdPrefix"),
        top=top_value,
        continuation=request.headers.get("x-ms-continuation-token") or None,
        entities=entities,
    )


def _time_filter(text: str | None) -> str | None:
    """An ISO-8601 time (``Z``, an offset, or none: UTC) in the store's canonical form."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace(" ", "+"))
    except ValueError as exc:
        raise ClientError(400, f"{text!r} is not an ISO-8601 date and time.") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return h.format_time(moment)
