"""A TCP relay that delays what it forwards: latency on a host's store link where the kernel
has no ``tc netem`` (a container's). Run inside the store namespace by ``lab``:

    python relay.py DELAY_FILE LISTEN_HOST:PORT=TARGET_HOST:PORT [...]

Every chunk read from either side is written to the other side after a delay drawn
uniformly from the range in ``DELAY_FILE`` (``"100-300"``, milliseconds; read again every
half second; absent or empty: no delay), in order: a chunk never overtakes the one before
it, so the stream stays intact and only slower. A client that falls silent is found by
TCP keepalives (10 s idle, 3 probes 2 s apart) and its target connection closed, as the
server itself would do without the relay in between. Bounded: each direction holds at most
256 chunks in flight (reading pauses meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
import time
from pathlib import Path

DELAYS: list[tuple[float, float]] = [(0.0, 0.0)]


async def watch(path: Path) -> None:
    while True:
        try:
            text = path.read_text().strip()
            low, _, high = text.partition("-")
            DELAYS[0] = (float(low) / 1000, float(high or low) / 1000) if text else (0.0, 0.0)
        except (OSError, ValueError):
            DELAYS[0] = (0.0, 0.0)
        await asyncio.sleep(0.5)


def keepalive(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 20_000)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(256)

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(send())
    last = 0.0
    try:
        while True:
            chunk = await reader.read(65536)
            low, high = DELAYS[0]
            last = max(last, time.monotonic() + random.uniform(low, high))
            await queue.put((last, chunk))
            if not chunk:
                break
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(Exception):
            writer.close()


async def serve(listen: str, target: str) -> asyncio.Server:
    host, port = listen.rsplit(":", 1)
    to_host, to_port = target.rsplit(":", 1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        keepalive(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, host, int(port), reuse_address=True)


async def main(argv: list[str]) -> None:
    asyncio.create_task(watch(Path(argv[0])))
    servers = [await serve(*pair.split("=", 1)) for pair in argv[1:]]
    print("relay ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
