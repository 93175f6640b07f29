"""The example tests' fake model APIs: ``tests/app/turn_support.LoopbackServer`` (an aiohttp
app on its own loop in a daemon thread, on a free port of 127.0.0.1, under ``/v1``) with one
shared ``release`` event (set: requests answer; cleared: a handler that waits on it holds its
request, so a test can kill the host mid-call). Subclasses add their routes in ``routes``."""

from __future__ import annotations

import threading

from aiohttp import web

from tests.app.turn_support import LoopbackServer as _Served


class LoopbackServer(_Served):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.release.set()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _routes(self, app: web.Application) -> None:
        self.routes(app)

    def _release(self) -> None:
        self.release.set()
