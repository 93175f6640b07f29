"""Headless Chromium for page tests, driven over the DevTools protocol with aiohttp alone.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); tests that use the
``browser`` fixture skip without it (``needs_chromium``).
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

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
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
