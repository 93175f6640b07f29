"""Campaign 6: slow and many connections against a real host, on loopback.

Attackers hold hundreds of slow-loris connections (request headers sent a few bytes at a
time), many idle ones (connected, silent), slow bodies, and more connections than the
host may open file descriptors for. Meanwhile a normal client keeps running
orchestrations and probing ``/admin/host/status``. The oracle is outside the host: every
normal request is answered, the attackers' connections are closed by the host, and the
host's log stays small. ``DURABLE_RELIABILITY_LONG=1`` runs the long version.

Every wait is bounded; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import APPS, WEBHOOK, HostProcess, wait_for

LONG = os.environ.get("DURABLE_RELIABILITY_LONG") == "1"
_SOFT_FDS = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
# Loopback connections cost a descriptor on each side; leave room for everything else.
_BUDGET = max(64, min(_SOFT_FDS // 3, 6000 if LONG else 700))
SLOW = _BUDGET // 2
IDLE = _BUDGET - SLOW
ROUNDS = 40 if LONG else 4
HOST_ENV = {
    "DURABLE_HOST_HEADER_TIMEOUT": "2",
    "DURABLE_HOST_BODY_TIMEOUT": "2",
    "DURABLE_HOST_MAX_CONNECTIONS": str(max(32, _BUDGET // 3)),
}
MAX_LOG_BYTES = 64 * 1024


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostProcess]:
    process = HostProcess(APPS / "basic", f"sqlite:{tmp_path / 'hub.db'}", env=dict(HOST_ENV))
    process.start()
    yield process
    process.kill()


CAP = int(HOST_ENV["DURABLE_HOST_MAX_CONNECTIONS"])
SETTLE = 15.0  # seconds for the host to close what it holds once the normal rounds are done


def _sockets(pid: int) -> int:
    """Sockets the host process holds open (its side of every connection, listeners too)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd).startswith("socket:")
    return count


@dataclass
class Tally:
    """What the attackers saw, and the most sockets the host held at once meanwhile.

    A client can count as connected before the host ever accepted it: once the listen
    backlog is full the kernel leaves the handshake half-done and completes it later. So
    whether the host keeps connections bounded is read from the host's own descriptors.
    """

    connected: int = 0
    closed_by_host: int = 0
    most_sockets: int = 0

    async def attack(self, port: int, stop: asyncio.Event, slow: bool) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
        except (OSError, TimeoutError):
            return  # refused, or left in the backlog until the attack ended: never held
        if stop.is_set():
            writer.close()
            return
        self.connected += 1
        try:
            if slow:  # slow-loris: request headers a few bytes at a time, never finished
                writer.write(b"GET /admin/host/status HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set():
                if slow:
                    writer.write(b"X-a: b\r\n")
                    await writer.drain()
                with contextlib.suppress(TimeoutError):
                    if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                        self.closed_by_host += 1
                        return
        except (ConnectionError, OSError):
            self.closed_by_host += 1
        finally:
            writer.close()


def _normal_round(host: HostProcess, i: int) -> bool:
    probe = host.get("/admin/host/status", timeout=30)
    instance = host.start_orchestration("hello_sequence", instance_id=f"normal-{i}")
    done = host.wait_for_status(instance, timeout=60)
    return probe.json()["state"] == "Running" and done["runtimeStatus"] == "Completed"


async def _watch(pid: int, tally: Tally, stop: asyncio.Event) -> None:
    while not stop.is_set():
        tally.most_sockets = max(tally.most_sockets, _sockets(pid))
        await asyncio.sleep(0.1)


async def _campaign(host: HostProcess) -> tuple[int, Tally, int]:
    assert host.process is not None
    port = int(host.base_url.rsplit(":", 1)[1])
    baseline = _sockets(host.process.pid)
    stop = asyncio.Event()
    tally = Tally()
    watcher = asyncio.create_task(_watch(host.process.pid, tally, stop))
    attackers = [
        asyncio.create_task(tally.attack(port, stop, slow=i < SLOW)) for i in range(SLOW + IDLE)
    ]
    served = 0
    for i in range(ROUNDS):
        served += await asyncio.to_thread(_normal_round, host, i)
    # Give the host time to close what it holds (bounded), then end the attack.
    for _ in range(int(SETTLE * 4)):
        if all(t.done() for t in attackers):
            break
        await asyncio.sleep(0.25)
    stop.set()
    await asyncio.gather(*attackers, watcher, return_exceptions=True)
    return served, tally, baseline


def test_slow_and_idle_connections_are_closed_while_normal_requests_are_served(host):
    served, tally, baseline = asyncio.run(_campaign(host))
    print(  # the campaign's numbers, for docs/reliability.md (pytest -s shows them)
        f"\n{SLOW} slow-loris + {IDLE} idle, cap {CAP}: {served}/{ROUNDS} normal rounds served,"
        f" {tally.connected} attacker connections established, {tally.closed_by_host} closed by"
        f" the host, at most {tally.most_sockets - baseline} sockets above the idle host's"
    )

    assert served == ROUNDS  # every normal round answered and completed
    assert tally.most_sockets <= baseline + CAP + 8  # the cap held (8: the normal client's)
    assert tally.closed_by_host >= min(tally.connected, CAP)  # slow and idle ones were dropped
    assert wait_for(lambda: _sockets(host.process.pid) <= baseline + 2, 30, "the host to let go")
    assert host.get("/admin/host/status").json()["state"] == "Running"
    assert host.log_path is not None and host.log_path.stat().st_size < MAX_LOG_BYTES


async def _idle(port: int, stop: asyncio.Event, closed: list[bool]) -> None:
    """Connect and say nothing."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        closed.append(True)
        return
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                    closed.append(True)
                    return
    except (ConnectionError, OSError):
        closed.append(True)
    finally:
        writer.close()


async def _slow_body(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {WEBHOOK}/orchestrators/hello_sequence/slow-body HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n[".encode()
    )
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def test_a_body_that_stops_arriving_is_answered_408_and_nothing_is_stored(host):
    port = int(host.base_url.rsplit(":", 1)[1])

    answer = asyncio.run(_slow_body(port))

    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert host.status("slow-body") is None


def test_running_out_of_file_descriptors_is_logged_briefly_and_the_host_recovers(host):
    # Lower the running host's descriptor limit below its connection cap, then flood it:
    # accept() fails with EMFILE until the attackers leave.
    assert host.process is not None
    resource.prlimit(host.process.pid, resource.RLIMIT_NOFILE, (128, 128))
    port = int(host.base_url.rsplit(":", 1)[1])

    async def flood() -> None:
        stop = asyncio.Event()
        closed: list[bool] = []
        tasks = [asyncio.create_task(_idle(port, stop, closed)) for _ in range(300)]
        await asyncio.sleep(3)  # accept keeps failing meanwhile
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(flood())

    assert wait_for(
        lambda: host.get("/admin/host/status", timeout=10).status == 200, 30, "the host"
    )
    instance = host.start_orchestration("hello_sequence", instance_id="after-the-flood")
    assert host.wait_for_status(instance)["runtimeStatus"] == "Completed"
    log = host.log_path.read_text() if host.log_path else ""
    assert "could not accept connections" in log
    assert len(log.encode()) < MAX_LOG_BYTES and log.count("Traceback") == 0


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 30)
    finally:
        writer.close()


def test_an_oversized_input_is_refused_on_its_declared_length_before_any_body_is_sent(host):
    port = int(host.base_url.rsplit(":", 1)[1])
    head = (
        f"POST {WEBHOOK}/orchestrators/hello_sequence/too-big HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {16 * 1024 * 1024}\r\n\r\n"
    ).encode()

    answer = asyncio.run(_exchange(port, head))  # not one byte of the body goes out

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"exceeds the limit of 4194304 bytes" in answer
    assert host.status("too-big") is None


def test_a_flood_of_malformed_requests_is_answered_400_and_logged_in_a_few_lines(host):
    port = int(host.base_url.rsplit(":", 1)[1])
    before = len(host.log_path.read_text().splitlines()) if host.log_path else 0  # start-up
    garbage = [
        b"\x16\x03\x01 not http\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n",
    ]

    async def flood() -> list[bytes]:
        return await asyncio.gather(*(_exchange(port, garbage[i % 3]) for i in range(300)))

    answers = asyncio.run(flood())

    assert all(a == b"" or a.startswith((b"HTTP/1.0 4", b"HTTP/1.1 4")) for a in answers)
    assert host.get("/admin/host/status").json()["state"] == "Running"
    log = host.log_path.read_text() if host.log_path else ""
    assert "refused malformed HTTP requests" in log
    assert log.count("Traceback") == 0 and len(log.splitlines()) - before < 20


async def _chunked_upload(port: int, total: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"POST {WEBHOOK}/orchestrators/hello_sequence/chunked HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        chunk = b"[" + b"1," * 32767 + b"1]"  # 64 KiB of digits, sent without a length
        with contextlib.suppress(ConnectionError):
            for _ in range(total // len(chunk) + 1):
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 30)
    finally:
        writer.close()


def test_a_body_without_a_length_is_counted_while_it_streams_and_refused_past_the_limit(host):
    port = int(host.base_url.rsplit(":", 1)[1])

    answer = asyncio.run(_chunked_upload(port, 6 * 1024 * 1024))

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert host.status("chunked") is None
