"""A TCP proxy between a store and the tests' PostgreSQL server that terminates a session
at one exact point: just after the server answered a COMMIT.

``pg_terminate_backend`` from outside lands wherever the session happens to be; the window
that matters here (the COMMIT answered, the client's next message not yet answered) is a
few microseconds wide, so a test that terminates sessions at random meets it now and then.
The proxy makes it every time. Once ``arm``-ed, it watches the server's messages (the
protocol's framing: a type byte, a 4-byte length), and when a ``ReadyForQuery`` follows a
``CommandComplete`` of ``COMMIT`` it passes both on, holds back what the client sends next,
and has the real server terminate that session (``pg_terminate_backend(pid, 5000)``, the
pid from the session's ``BackendKeyData``). The server's own FATAL error reaches the client
as the answer to its next message; the end of the connection reaches it half a second later,
as a FIN late on a slow network would. The connection must not use TLS
(``sslmode=disable``): the proxy reads the messages.
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg

LATE_FIN_SECONDS = 0.5


class SessionCutter:
    def __init__(self, server_port: int, admin_url: str) -> None:
        self.server_port = server_port
        self.admin_url = admin_url
        self.port = 0
        self.armed = False
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._sessions: set[asyncio.Task[None]] = set()

    async def start(self) -> SessionCutter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def url(self, user: str, password: str) -> str:
        return (
            f"postgresql://{user}:{password}@127.0.0.1:{self.port}/postgres"
            "?sslmode=disable&gssencmode=disable"
        )

    def arm(self) -> None:
        """Terminate the session of the next COMMIT the server answers."""
        self.armed = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in self._sessions:
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await self._relay(client_r, client_w)
        except asyncio.CancelledError:
            client_w.close()  # the proxy closes: its sessions end with it
        finally:
            self._sessions.discard(task)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.server_port)
        held = asyncio.Event()  # set: what the client sends is dropped (its server is gone)

        async def upstream() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await client_r.read(65536):
                    if not held.is_set():
                        server_w.write(data)
                        await server_w.drain()
            server_w.close()

        async def downstream() -> None:
            pid, committed, buffer = 0, False, b""
            with contextlib.suppress(ConnectionError):
                while chunk := await server_r.read(65536):
                    buffer += chunk
                    while len(buffer) >= 5:
                        size = 1 + int.from_bytes(buffer[1:5], "big")
                        if len(buffer) < size:
                            break
                        kind, payload, buffer = buffer[:1], buffer[5:size], buffer[size:]
                        if kind == b"K":
                            pid = int.from_bytes(payload[:4], "big")
                        if kind == b"C":
                            committed = payload.startswith(b"COMMIT")
                        cut = kind == b"Z" and committed and self.armed
                        committed = committed and kind != b"Z"
                        if cut:
                            held.set()
                        client_w.write(kind + (4 + len(payload)).to_bytes(4, "big") + payload)
                        await client_w.drain()
                        if cut:
                            self.armed, self.cuts = False, self.cuts + 1
                            await self._terminate(pid)
            if held.is_set():
                await asyncio.sleep(LATE_FIN_SECONDS)
            client_w.close()

        await asyncio.gather(upstream(), downstream())

    async def _terminate(self, pid: int) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as conn:
            await conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
