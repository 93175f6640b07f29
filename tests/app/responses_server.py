"""A local OpenAI-compatible Responses server in background mode, for the background-call tests.

``ResponsesServer`` serves ``POST /v1/responses`` (``background: true``), ``GET
/v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel`` on 127.0.0.1 from a thread of the
test process. A new request is ``queued``; each poll moves it along ``statuses`` (default
``queued``, ``in_progress``, ``completed``: the last one repeats). The answer is the offline
planner's, read back from the Responses input items, with real function calls and usage, so a
turn through this server behaves like an offline one. Tests steer it:

* ``hold()``: requests stay ``in_progress`` until ``Hold.release``; ``Hold.polled`` is set once
  a held request has been polled (a real signal that the turn is waiting, not a sleep);
* ``drop_polls``: that many next polls lose the connection (the socket is closed unanswered);
* ``forget()``: the server no longer knows any request (a poll answers 404, as a provider does
  after it expired a request).

Every call is recorded (``submits``, ``polls``, ``cancels``), so tests count them.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from kernel.turn import planner
from tests.app.turn_support import LoopbackServer

DEFAULT_STATUSES = ("queued", "in_progress", "completed")


@dataclass
class Hold:
    polled: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Request:
    id: str
    body: dict[str, Any]
    polls: int = 0
    status: str = "queued"


class ResponsesServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.submits: list[dict[str, Any]] = []
        self.polls: list[str] = []
        self.cancels: list[str] = []
        self.statuses: tuple[str, ...] = DEFAULT_STATUSES
        self.drop_polls = 0
        self.held: Hold | None = None
        self._known: dict[str, Request] = {}
        self._ids = itertools.count(1)

    def _release(self) -> None:
        if self.held is not None:
            self.held.release()

    def reset(self) -> None:
        with self._lock:
            self.statuses, self.drop_polls, self.held = DEFAULT_STATUSES, 0, None

    def hold(self) -> Hold:
        self.held = Hold()
        return self.held

    def forget(self) -> None:
        with self._lock:
            self._known.clear()

    def submits_for(self, text: str) -> list[dict[str, Any]]:
        """The submits whose input holds a user message ``text`` (one session's requests)."""
        return [
            s for s in self.submits if any(i.get("content") == text for i in s["body"]["input"])
        ]

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._create)
        app.router.add_get("/v1/responses/{id}", self._retrieve)
        app.router.add_post("/v1/responses/{id}/cancel", self._cancel)

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            req = Request(f"resp_{next(self._ids)}", body)
            self._known[req.id] = req
            self.submits.append({"id": req.id, "body": body, "headers": dict(request.headers)})
        return web.json_response(_body(req))

    async def _retrieve(self, request: web.Request) -> web.StreamResponse:
        rid = request.match_info["id"]
        with self._lock:
            self.polls.append(rid)
            drop = self.drop_polls > 0
            self.drop_polls -= 1 if drop else 0
            req = self._known.get(rid)
            held = self.held
        if drop:
            # Lose the connection: no status line, the socket closed under the client.
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if req is None:
            return _not_found(rid)
        if req.status not in ("cancelled", "completed", "failed"):
            if held is not None and not held.released.is_set():
                req.status = "in_progress"
                held.polled.set()
            else:
                req.status = self.statuses[min(req.polls, len(self.statuses) - 1)]
                req.polls += 1
        return web.json_response(_body(req))

    async def _cancel(self, request: web.Request) -> web.Response:
        rid = request.match_info["id"]
        with self._lock:
            self.cancels.append(rid)
            req = self._known.get(rid)
        if req is None:
            return _not_found(rid)
        if req.status in ("queued", "in_progress"):
            req.status = "cancelled"
        return web.json_response(_body(req))


def _not_found(rid: str) -> web.Response:
    error = {"message": f"Response with id '{rid}' not found.", "type": "invalid_request_error"}
    return web.json_response({"error": {**error, "param": None, "code": None}}, status=404)


def _body(req: Request) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": req.id,
        "object": "response",
        "status": req.status,
        "background": True,
        "model": req.body.get("model", ""),
        "output": [],
        "usage": None,
        "error": None,
    }
    if req.status == "completed":
        body.update(_answer(req.body["input"]))
    return body


def _answer(items: list[dict[str, Any]]) -> dict[str, Any]:
    response = planner.plan(_entries(items))
    output: list[dict[str, Any]]
    if response.tool_calls:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{call.id}",
                "call_id": call.id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
            for call in response.tool_calls
        ]
    else:
        text: dict[str, Any] = {"type": "output_text", "text": response.content, "annotations": []}
        output = [{"type": "message", "role": "assistant", "content": [text]}]
    usage = response.usage
    return {
        "output": output,
        "usage": {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def _entries(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items back into the session entries the planner reads."""
    entries = []
    for n, item in enumerate(items, start=1):
        if item.get("type") == "function_call_output":
            entry = {
                "role": "tool",
                "text": item["output"],
                "data": {"tool_call_id": item["call_id"]},
            }
        elif item.get("type") == "function_call":
            entry = {"role": "assistant", "text": None, "data": {}}
        else:
            entry = {"role": item["role"], "text": item.get("content"), "data": {}}
        entries.append({"n": n, **entry})
    return entries
