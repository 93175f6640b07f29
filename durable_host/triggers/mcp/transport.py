"""The extension's MCP endpoints over HTTP. IO.

* ``POST /runtime/webhooks/mcp`` - Streamable HTTP, stateless as the extension serves it: the
  client must accept both ``application/json`` and ``text/event-stream`` (else 406); the
  answer to a request is one SSE ``message`` event (or, with
  ``DURABLE_HOST_MCP_RESPONSE=json``, a JSON body), an empty stream when the client cancelled
  the request; a notification or a response is answered 202 with no body. ``initialize`` hands out ``Mcp-Session-Id`` (``sessions``); a later
  request that carries one must verify (else 400 ``Invalid client state.``); an
  ``MCP-Protocol-Version`` header this server does not speak is 400. ``GET`` and ``DELETE``
  are 405 (no server-initiated stream, nothing to delete: the session is a signed id).
* ``GET /runtime/webhooks/mcp/sse`` - the legacy SSE transport: the first event, ``endpoint``,
  names the message endpoint relative to this one, ``message?azmcpcs=<token>``, with the
  ``code`` the client connected with appended, as the extension announces it; the answers to
  the messages posted there arrive as ``message`` events on this stream. A comment line every
  ``KEEPALIVE`` seconds keeps proxies from closing an idle stream.
* ``POST /runtime/webhooks/mcp/message?azmcpcs=...`` - 202 ``Accepted`` once the message is
  read; 400 with the extension's text when ``azmcpcs`` is missing or does not verify, or when
  no live host holds its stream. A message for a stream another host holds goes to that
  host's inbox in the task hub's store (``relay``), and the holder answers on the stream;
  503 when that inbox is full.

Bad input (a body over the host's request limit, invalid JSON, not JSON-RPC) is answered
with the JSON-RPC error and an HTTP 4xx, and nothing runs. Keys are checked before a request
gets here (``http.auth.Gate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from aiohttp import web

from durable_host.engine.client import ClientError
from durable_host.http.limits import Limits, read_body
from durable_host.triggers.mcp import protocol
from durable_host.triggers.mcp.protocol import Origin, Server
from durable_host.triggers.mcp.relay import InboxFull, Relay, new_tag
from durable_host.triggers.mcp.sessions import Sessions

log = logging.getLogger("durable_host.mcp")

BASE = "/runtime/webhooks/mcp"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
STATE_QUERY = "azmcpcs"
KEEPALIVE = 15.0
MAX_SSE_SESSIONS = 1000  # open legacy streams per host


def _rpc_error(status: int, message: str, code: int = -32000, id_: Any = None) -> web.Response:
    return web.json_response(protocol.error(id_, code, message), status=status)


def _sse_event(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


class McpRoutes:
    def __init__(
        self, server: Server, sessions: Sessions, limits: Limits, *, json_responses: bool = False
    ) -> None:
        self.server = server
        self.sessions = sessions
        self.limits = limits
        self.json_responses = json_responses
        self._streams: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}  # None: close
        self._background: set[asyncio.Task[Any]] = set()
        self.relay = Relay(sessions.store, new_tag())
        self._poller: asyncio.Task[None] | None = None

    @staticmethod
    def owns(path: str) -> bool:
        return path == BASE or path.startswith(BASE + "/")

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        rest = path[len(BASE) :].strip("/").lower()
        if rest == "":
            if request.method != "POST":
                return web.Response(status=405, headers={"Allow": "POST"})
            return await self._streamable(request)
        if rest == "sse":
            if request.method != "GET":
                return web.Response(status=405, headers={"Allow": "GET"})
            return await self._sse(request)
        if rest == "message":
            if request.method != "POST":
                return web.Response(status=405, headers={"Allow": "POST"})
            return await self._message(request)
        return _rpc_error(404, f"No MCP endpoint {path}")

    async def _read(
        self, request: web.Request
    ) -> tuple[dict[str, Any] | None, web.Response | None]:
        """The request's JSON-RPC message, or the answer that refuses it."""
        try:
            body = await read_body(
                request, self.limits.max_request_bytes, "MCP message", self.limits
            )
        except ClientError as exc:
            return None, _rpc_error(exc.status, exc.message)
        try:
            message = json.loads(body)
        except ValueError as exc:
            return None, _rpc_error(400, f"Parse error: the body is not JSON ({exc})", -32700)
        problem = protocol.check_message(message)
        if problem is not None:
            id_ = message.get("id") if isinstance(message, dict) else None
            id_ = id_ if isinstance(id_, str | int) and not isinstance(id_, bool) else None
            return None, _rpc_error(400, f"Invalid Request: {problem}", -32600, id_)
        return message, None

    async def _streamable(self, request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "").lower()
        if "application/json" not in accept or "text/event-stream" not in accept:
            return _rpc_error(
                406,
                "Not Acceptable: Client must accept both application/json and text/event-stream",
            )
        session_id: str | None = None
        token = request.headers.get(SESSION_HEADER)
        if token:
            session_id = self.sessions.verify(token)
            if session_id is None:
                return _rpc_error(400, "Invalid client state.")
        version = request.headers.get(VERSION_HEADER)
        if version and version not in protocol.PROTOCOL_VERSIONS:
            return _rpc_error(400, f"Bad Request: Unsupported protocol version '{version}'")
        message, refused = await self._read(request)
        if message is None:
            assert refused is not None
            return refused
        headers: dict[str, str] = {}
        if message.get("method") == "initialize" and "id" in message:
            session_id, token = self.sessions.issue()
            headers[SESSION_HEADER] = token
        origin = Origin("http-streamable", session_id, dict(request.headers))
        if "id" not in message or "method" not in message:
            await self.server.handle(message, origin)
            return web.Response(status=202, headers=headers)
        task = asyncio.ensure_future(self.server.handle(message, origin))
        answer = await self._outcome(task)
        if self.json_responses:
            if answer is None:  # cancelled by the client: no answer
                return web.Response(status=202, headers=headers)
            return web.json_response(answer, headers=headers)
        # One event, sent whole once it is known: the stream carries no progress or requests
        # from this server, so holding the headers back costs the client nothing.
        body = _sse_event("message", json.dumps(answer)) if answer is not None else b""
        headers["Cache-Control"] = "no-cache,no-store"
        return web.Response(body=body, content_type="text/event-stream", headers=headers)

    @staticmethod
    async def _outcome(task: asyncio.Task[dict[str, Any] | None]) -> dict[str, Any] | None:
        """The answer of a request handled in ``task``; None when a ``notifications/cancelled``
        cancelled it (the protocol sends no answer then). The request's own cancellation (the
        client went away) cancels the task with it."""
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task.cancelled():
            return None
        return task.result()

    async def _sse(self, request: web.Request) -> web.StreamResponse:
        if len(self._streams) >= MAX_SSE_SESSIONS:
            return _rpc_error(503, "Too many open MCP SSE streams on this host; try again later.")
        client_id, token = self.sessions.issue(prefix=self.relay.tag + "-")
        endpoint = f"message?{STATE_QUERY}={token}"
        code = request.query.get("code") or request.headers.get("x-functions-key")
        if code:
            endpoint += "&code=" + code
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._streams[client_id] = queue
        try:
            await self._hold()
        except Exception:  # no inbox: a stream other hosts could not reach
            self._streams.pop(client_id, None)
            log.warning("MCP SSE: could not open this host's inbox", exc_info=True)
            return _rpc_error(503, "The MCP SSE transport is unavailable; try again later.")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache,no-store"}
        )
        try:
            await response.prepare(request)
            await response.write(_sse_event("endpoint", endpoint))
            while True:
                try:
                    answer = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if answer is None:
                    break  # the host stops
                await response.write(_sse_event("message", json.dumps(answer)))
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client closed its stream
        finally:
            self._streams.pop(client_id, None)
        return response

    async def _message(self, request: web.Request) -> web.StreamResponse:
        token = request.query.get(STATE_QUERY)
        hint = " Please connect to the /sse endpoint to initiate your session."
        if not token:
            return web.json_response("Missing service context." + hint, status=400)
        client_id = self.sessions.verify(token)
        if client_id is None:
            return web.json_response("Invalid client state." + hint, status=400)
        message, refused = await self._read(request)
        if message is None:
            assert refused is not None
            return refused
        if client_id in self._streams:
            self._dispatch(client_id, message, dict(request.headers))
            return web.Response(status=202, text="Accepted")
        try:
            posted = await self.relay.post(client_id, message, request.headers)
        except InboxFull as exc:
            return _rpc_error(503, f"The host holding this stream is busy ({exc}); try again.")
        if not posted:
            text = f"No active session for client '{client_id}'." + hint
            return web.json_response(text, status=400)
        return web.Response(status=202, text="Accepted")

    def _dispatch(self, client_id: str, message: dict[str, Any], headers: dict[str, str]) -> None:
        """Handle a message for a stream this host holds; the answer goes to the stream."""
        queue = self._streams.get(client_id)
        if queue is None:
            return  # the stream closed meanwhile: nobody to answer, as on the extension
        origin = Origin("http-sse", client_id, headers)
        task = asyncio.ensure_future(self._answer_on_stream(message, origin, queue))
        self._background.add(task)  # kept until done: a bare task may be collected mid-run
        task.add_done_callback(self._background.discard)

    async def _hold(self) -> None:
        """Before the first stream: this host's inbox exists and is polled while it holds
        streams (``relay``)."""
        if self._poller is not None and not self._poller.done():
            return
        await self.relay.open()

        async def deliver(client_id: str, message: dict[str, Any], headers: dict[str, str]) -> None:
            self._dispatch(client_id, message, headers)

        # Polls while this host holds a stream; the next stream starts it again.
        self._poller = asyncio.create_task(self.relay.run(lambda: bool(self._streams), deliver))

    async def _answer_on_stream(
        self, message: dict[str, Any], origin: Origin, queue: asyncio.Queue[dict[str, Any] | None]
    ) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            answer = await self.server.handle(message, origin)
            if answer is not None:
                queue.put_nowait(answer)

    async def close(self) -> None:
        """Before the HTTP server stops: end the open SSE streams (their clients reconnect to
        another host) and drop the answers still being made for them."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(Exception):  # best effort: else it goes stale
                await self.relay.close()
        for task in list(self._background):
            task.cancel()
        for queue in self._streams.values():
            queue.put_nowait(None)
