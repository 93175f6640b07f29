"""The live session page in headless Chromium, driven over the DevTools protocol.

The page is opened before the session exists; then submissions (over the API and through the
page's own form), a document and a child task are committed, and the page must show each of
them - submissions with their answers, entries, documents, the task graph with statuses - by
following the change stream alone, having seen every change record exactly once.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import asyncio
import json
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kernel import ids
from tests.harness import WEBHOOK, HostProcess, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium package: apt-get install -y chromium"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--remote-debugging-port=0",
]
SESSION = "pagetest"


class DevTools:
    """Just enough of the DevTools protocol: open a page, evaluate JavaScript, take a picture.

    The websocket runs on its own event loop in a thread, so tests call it synchronously.
    """

    def __init__(self, ws_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self._sync(self._connect(ws_url))
        self.session = ""

    def _sync(self, coro: Any, timeout: float = 15) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self, ws_url: str) -> None:
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(ws_url, max_msg_size=0)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            future = self.pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def _call(self, method: str, params: dict[str, Any], session: str) -> dict[str, Any]:
        self.next_id += 1
        future = self.loop.create_future()
        self.pending[self.next_id] = future
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self.ws.send_str(json.dumps(message))
        reply: dict[str, Any] = await future
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, page: bool = True
    ) -> dict[str, Any]:
        return self._sync(self._call(method, params or {}, self.session if page else ""))

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": url}, page=False)["targetId"]
        attached = self.call(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, page=False
        )
        self.session = attached["sessionId"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot")["data"]))

    def close(self) -> None:
        async def shut() -> None:
            await self.ws.close()
            await self.http.close()

        self._sync(shut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def devtools_url(process: subprocess.Popen[bytes], timeout: float = 20) -> str:
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline, buffer = time.monotonic() + timeout, b""
    while time.monotonic() < deadline and process.poll() is None:
        if selector.select(max(0.0, deadline - time.monotonic())):
            buffer += process.stderr.read1(4096)  # type: ignore[attr-defined]
            for line in buffer.decode(errors="replace").splitlines():
                if line.startswith("DevTools listening on "):
                    return line.removeprefix("DevTools listening on ").strip()
    raise RuntimeError(
        f"chromium gave no DevTools address: {buffer.decode(errors='replace')[-2000:]}"
    )


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    assert CHROMIUM is not None
    process = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    tools = None
    try:
        tools = DevTools(devtools_url(process))
        yield tools
    finally:
        if tools is not None:
            tools.close()
        process.kill()
        process.wait(10)


def js(value: str) -> str:
    return json.dumps(value)


def row(sub_id: str, what: str) -> str:
    return f"document.querySelector('tr[data-submission={js(sub_id)}]')?.{what} ?? null"


def shown(tools: DevTools, expression: str, expected: Any, what: str) -> None:
    wait_for(lambda: tools.evaluate(expression) == expected, 20, what)


def test_the_page_follows_a_session_live(
    kernel_host: HostProcess, browser: DevTools, tmp_path: Path
) -> None:
    browser.open(f"{kernel_host.base_url}/api/sessions/{SESSION}/page")
    shown(
        browser, "document.getElementById('session-id')?.textContent ?? null", SESSION, "the page"
    )
    shown(browser, "document.body.dataset.state", "no session yet", "the page to find no session")

    sub_id = kernel_host.post(
        f"/api/sessions/{SESSION}/submissions", {"requestId": "r1", "text": "hello page"}
    ).json()["submissionId"]
    shown(browser, row(sub_id, "dataset.status"), "completed", "the submission to complete")
    assert (
        browser.evaluate(row(sub_id, "querySelector('td.answer').textContent"))
        == 'You said: "hello page" (2 words).'
    )
    turn = ids.turn_instance_id(SESSION, sub_id)
    assert (
        browser.evaluate(f"document.querySelector('li[data-task={js(turn)}]').dataset.status")
        == "completed"
    )
    roles = "[...document.querySelectorAll('#entries li')].map(li => li.dataset.role)"
    assert browser.evaluate(roles) == ["user", "assistant"]

    child = f"{turn}:check"
    note = {"id": "plan", "type": "note", "data": {"title": "Plan", "text": "ship it"}}
    task = {"id": child, "kind": "check", "parent": turn, "status": "running", "phase": "verify"}
    resp = kernel_host.post(
        f"{WEBHOOK}/entities/session/{SESSION}?op=commit", {"documents": [note], "tasks": [task]}
    )
    assert resp.status == 202
    nested = f"document.querySelector('li[data-task={js(turn)}] li[data-task={js(child)}]')?.dataset.phase ?? null"
    shown(browser, nested, "verify", "the child task under its turn")
    assert "ship it" in browser.evaluate(
        "document.querySelector('[data-document=\"plan\"]').textContent"
    )

    browser.evaluate(
        "document.getElementById('ask-text').value = 'typed on the page';"
        "document.querySelector('#ask button').click(); true"
    )
    typed = (
        "[...document.querySelectorAll('#submissions tbody tr')]"
        ".filter(tr => tr.textContent.includes('typed on the page')).map(tr => tr.dataset.status)"
    )
    shown(browser, typed, ["completed"], "the page's own submission to complete")

    view = kernel_host.get(f"/api/sessions/{SESSION}").json()
    shown(
        browser,
        "Number(document.body.dataset.followCursor)",
        view["cursor"],
        "the page to catch up",
    )
    cursors = browser.evaluate(
        "[...document.querySelectorAll('#changes li')].map(li => Number(li.dataset.cursor))"
    )
    start = int(browser.evaluate("document.body.dataset.followedFrom"))
    assert sorted(cursors) == list(range(start + 1, view["cursor"] + 1))
    assert browser.evaluate("document.body.dataset.state") == "live"
    browser.screenshot(tmp_path / "session-page.png")
