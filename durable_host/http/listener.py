"""Accept connections without letting clients exhaust the host.

``serve`` runs an aiohttp application on one listening socket with four guards:

* **Header timeout.** aiohttp's keep-alive timer starts when a connection opens and is
  re-armed after each response; it closes a connection that has no complete request by
  then. Set to ``Limits.header_timeout``, it bounds both an idle keep-alive connection
  and a client that sends its request line and headers slowly (slow-loris). Bodies are
  timed where they are read (``limits.read_body``).
* **Connection cap.** At most ``Limits.max_connections`` connections are open. At the
  cap the accept loop first closes the oldest connection that is waiting for a request
  and has had ``_EVICT_AFTER`` seconds to send one (a request in progress is never
  closed); with none to close it stops accepting, and the kernel's backlog holds new
  clients until a connection ends. The cap keeps file descriptors for the store.
* **Quiet accept errors.** A failed ``accept`` (out of file descriptors, say) is counted
  and logged at most once per ``_LOG_INTERVAL`` seconds with the count, instead of one
  traceback per attempt; the loop backs off briefly and goes on.
* **Quiet protocol errors.** A malformed request (bad request line, oversized header) is
  the client's fault: aiohttp answers it 400 and would log a traceback per request; those
  records are summarised the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from durable_host.http.limits import Limits

log = logging.getLogger("durable_host.http")
_LOG_INTERVAL = 10.0
_EVICT_AFTER = 1.0
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class RateLimitedLog:
    """Counts events and logs one line per interval: ``<text> (N in the last S s; last: …)``."""

    def __init__(self, logger: logging.Logger, text: str, interval: float = _LOG_INTERVAL):
        self.logger, self.text, self.interval = logger, text, interval
        self.count = 0
        self.total = 0
        self.last_logged = -interval

    def note(self, detail: object) -> None:
        self.count += 1
        self.total += 1
        now = time.monotonic()
        if now - self.last_logged >= self.interval:
            last = " ".join(str(detail).split())[:200]  # one line, whatever the client sent
            self.logger.warning(
                "%s (%d in the last %.0f s; last: %s)", self.text, self.count, self.interval, last
            )
            self.count, self.last_logged = 0, now


class _ProtocolErrorFilter(logging.Filter):
    """Turns aiohttp's per-request tracebacks for malformed requests into rate-limited lines."""

    def __init__(self) -> None:
        super().__init__()
        self.summary = RateLimitedLog(log, "refused malformed HTTP requests")

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            self.summary.note(f"{type(exc).__name__}: {exc.message}")
            return False
        return True


def default_max_connections() -> int:
    """Half the file descriptors this process may open, at most 1,000."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1000
    return max(16, min(1000, soft // 2))


class GuardedSite(web.BaseSite):
    """A TCP site with its own accept loop: the cap, eviction and quiet errors above."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, max_connections: int):
        super().__init__(runner)
        self.host, self.requested_port = host, port
        self.max_connections = max_connections
        self.port = port
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._born: dict[object, float] = {}
        self.accept_errors = RateLimitedLog(log, "could not accept connections")
        self.at_cap = RateLimitedLog(log, f"{max_connections} connections open (the cap)")

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.requested_port), family=family, backlog=128)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sock is not None:
            self._sock.close()
        await super().stop()

    async def _accept_loop(self) -> None:
        # Nothing may end this loop but a stop: a dead loop would leave the port open and
        # silent (clients queue in the backlog forever).
        while True:
            try:
                await self._accept_some()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged, then accepting goes on
                self.accept_errors.note(repr(exc))
                await asyncio.sleep(0.1)

    async def _accept_some(self) -> None:
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None and self._sock is not None
        while True:
            if len(server.connections) >= self.max_connections:
                await self._client_waiting()  # evict only to make room for someone
                if not self._evict(server):
                    self.at_cap.note("accepting paused")
                    await asyncio.sleep(0.05)
                    continue
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                self.accept_errors.note(exc)
                await asyncio.sleep(0.1 if exc.errno in _RESOURCE_ERRORS else 0.01)
                continue
            try:
                _, handler = await loop.connect_accepted_socket(server, conn)
            except OSError as exc:
                conn.close()
                self.accept_errors.note(exc)
                continue
            self._born[handler] = loop.time()

    async def _client_waiting(self) -> None:
        """Return once the listening socket has a connection to accept."""
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = self._sock.fileno()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)

    def _evict(self, server: web.Server) -> bool:
        """Close the oldest connection idle long enough; False when every one is busy."""
        now = asyncio.get_running_loop().time()
        live = server.connections
        self._born = {h: self._born.get(h, now) for h in live}
        for handler in live:
            if now - self._born[handler] >= _EVICT_AFTER and _waiting_for_request(handler):
                self.at_cap.note("closed an idle connection")
                handler.force_close()
                del self._born[handler]
                return True
        return False


def _waiting_for_request(handler: object) -> bool:
    # aiohttp keeps no public flag for "between requests": its keep-alive check reads the
    # same future (``RequestHandler._process_keepalive``), set while it awaits a request.
    waiter = getattr(handler, "_waiter", None)
    return waiter is not None and not waiter.done()


async def serve(
    app: web.Application, host: str, port: int, limits: Limits
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: any free port); the runner and the bound port."""
    logging.getLogger("aiohttp.server").addFilter(_ProtocolErrorFilter())
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.header_timeout)
    await runner.setup()
    cap = limits.max_connections or default_max_connections()
    site = GuardedSite(runner, host, port, cap)
    await site.start()
    return runner, site.port
