"""Support for the turn tests: a local OpenAI-compatible model server and turn helpers.

``ModelServer`` speaks chat completions on 127.0.0.1 from a thread of the test process. By
default it answers like the offline planner (it turns the chat messages back into session
entries and asks ``kernel.turn.planner``), with real tool calls and usage, so a turn through the
OpenAI path behaves like the offline one. Tests steer it per request:

* ``script``: a function ``(messages) -> dict | None`` that may return a reply spec first:
  ``{"status": 429, "headers": {...}}``, ``{"delay": seconds}``, ``{"tool_calls": [...]}``,
  ``{"usage": {...}}`` (merged over the planner's answer); a delayed reply ends early when
  the server stops, so a long delay never holds up the teardown;
* ``hold()``: the next request waits until the test releases it (``Held.release``), after the
  test has seen it arrive (``Held.arrived``): a real signal, not a sleep.

Every request is recorded (``requests``: messages, headers, query), so tests count model calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from adapters.model_background import entries_from_messages
from kernel.turn import planner
from tests.harness import ROOT, HostProcess, store_spec_for, wait_for

Script = Callable[[list[dict[str, Any]]], "dict[str, Any] | None"]
FINAL = ("completed", "failed", "cancelled")


@dataclass
class Held:
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


class LoopbackServer:
    """An aiohttp app on 127.0.0.1, served from a thread of the test process (``base_url`` once
    started); subclasses add their routes and let their held requests go on ``stop``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def start(self) -> Self:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def stop(self) -> None:
        self._release()
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """Let every held request go (a held handler would keep the loop from stopping)."""

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        ready.set()
        self._loop.run_forever()


class ModelServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.script: Script | None = None
        self._holds: list[Held] = []
        self._stopping: asyncio.Event | None = None  # made on the server's loop

    def _release(self) -> None:
        for held in self._holds:
            held.release()
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    def hold(self) -> Held:
        held = Held()
        with self._lock:
            self._holds.append(held)
        return held

    def calls_by_length(self) -> dict[int, int]:
        """How many requests carried each transcript length (one length = one round)."""
        counts: dict[int, int] = {}
        for request in self.requests:
            length = len(request["messages"])
            counts[length] = counts.get(length, 0) + 1
        return counts

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._completions)

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        with self._lock:
            self.requests.append(
                {
                    "messages": messages,
                    "headers": dict(request.headers),
                    "query": dict(request.query),
                    "at": time.time(),
                }
            )
            held = self._holds.pop(0) if self._holds else None
        if held is not None:
            held.arrived.set()
            await asyncio.to_thread(held.released.wait, 60)
        spec = (self.script(messages) if self.script else None) or {}
        if spec.get("delay"):
            if self._stopping is None:
                self._stopping = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), spec["delay"])
        if spec.get("status"):
            return web.json_response(
                {"error": {"message": f"scripted {spec['status']}"}},
                status=spec["status"],
                headers=spec.get("headers"),
            )
        return web.json_response(_completion(messages, spec, body.get("model", "")))


def _completion(messages: list[dict[str, Any]], spec: dict[str, Any], model: str) -> dict[str, Any]:
    response = planner.plan(entries_from_messages(messages))
    calls = spec.get("tool_calls", [c.to_openai() for c in response.tool_calls])
    usage = {**response.usage.to_dict(), **spec.get("usage", {})}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else response.content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": usage,
    }


# --- hosts and turns ------------------------------------------------------------------------


def state_store_env(kind: str) -> dict[str, str]:
    """On SQLite the app keeps its ledger and content in files (the suite may export an
    ``AzureWebJobsStorage`` for the Azure hosts, so say so); on Azure it finds blobs by itself,
    from ``AzureWebJobsStorage``, as a Function app does."""
    return {} if kind == "azure" else {"AGENT_STATE_STORE": "file"}


def turn_env(
    tmp: Path, extra: dict[str, str] | None = None, kind: str = "sqlite"
) -> dict[str, str]:
    return {
        **state_store_env(kind),
        "AGENT_CONTENT_DIR": str(tmp / "content"),
        "AGENT_LEDGER_DIR": str(tmp / "ledger"),
        "AGENT_TOOL_LEDGER_FILE": str(tmp / "tool-ledger.txt"),
        **(extra or {}),
    }


def start_turn_host(request: Any, kind: str, tmp: Path, env: dict[str, str]) -> HostProcess:
    """A host of the kernel app on the store kind under test, with the turn's settings."""
    full = turn_env(tmp, env, kind)
    if kind == "azure":
        from tests.conftest import azure_env

        full = {**azure_env(request, tmp.name), **full}
    return HostProcess(ROOT, store_spec_for(kind, tmp, "kernel"), env=full).start()


def submit(host: HostProcess, session: str, text: str, request_id: str = "r1") -> str:
    response = host.post(
        f"/api/sessions/{session}/submissions", {"requestId": request_id, "text": text}
    )
    assert response.status == 202, (response.status, response.body)
    return str(response.json()["submissionId"])


def submission(host: HostProcess, session: str, sub: str) -> dict[str, Any]:
    return host.get(f"/api/sessions/{session}/submissions/{sub}").json() or {}


def wait_final(host: HostProcess, session: str, sub: str, timeout: float = 60) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        view = submission(host, session, sub)
        return view if view.get("status") in FINAL else None

    return wait_for(final, timeout, f"submission {sub} to finish", interval=0.05)


def view(host: HostProcess, session: str) -> dict[str, Any]:
    return host.get(f"/api/sessions/{session}").json()


def entries_of(host: HostProcess, session: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in view(host, session)["entries"] if kind is None or e["kind"] == kind]


def run_id(session: str, sub: str) -> str:
    return f"{session}:turn:{sub}:run"


def custom_status(host: HostProcess, instance_id: str) -> dict[str, Any]:
    status = host.status(instance_id) or {}
    custom = status.get("customStatus")
    return json.loads(custom) if isinstance(custom, str) else (custom or {})


def wait_phase(
    host: HostProcess, instance_id: str, phase: str, timeout: float = 60
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = custom_status(host, instance_id)
        return found if found.get("phase") == phase else None

    return wait_for(
        probe,
        timeout,
        f"{instance_id} in phase {phase}",
    )


def history(host: HostProcess, instance_id: str) -> list[dict[str, Any]]:
    status = host.status(instance_id, "?showHistory=true") or {}
    return list(status.get("historyEvents") or [])
