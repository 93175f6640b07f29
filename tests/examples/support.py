"""A loopback HTTP server for the example tests' fake model APIs: an aiohttp app on its own
event loop in a daemon thread, on a free port of 127.0.0.1, serving under ``/v1``.

Subclasses add their routes in ``routes`` and share ``release`` (set: requests answer; cleared:
a handler that waits on it holds its request, so a test can kill the host mid-call)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class LoopbackServer:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.loop = asyncio.new_event_loop()
        self.base_url = ""

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(10)
        return self

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        self.routes(app)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.release.set()
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
