"""Sync activities run on reused daemon threads; a call that never returns keeps only its own."""

from __future__ import annotations

import asyncio
import threading

from durable_host.functions import invocation


def test_threads_are_reused_and_a_stuck_call_does_not_hold_the_next():
    threads = invocation._DaemonThreads(idle=5.0)
    release = threading.Event()
    seen: list[int] = []
    done = threading.Semaphore(0)

    def record() -> None:
        seen.append(threading.get_ident())
        done.release()

    threads.submit(release.wait)  # stuck until released
    for _ in range(3):
        threads.submit(record)
        assert done.acquire(timeout=10)
        idle = threading.Event()
        for _ in range(1000):  # the thread goes idle right after the call returns
            if threads._idle == 1:
                idle.set()
                break
            idle.wait(0.01)
        assert idle.is_set()
    # Sequential calls after the first find the thread of the previous one idle.
    assert len(set(seen)) == 1
    release.set()


def test_daemon_call_returns_the_value_and_raises_the_error():
    def boom() -> None:
        raise ValueError("boom")

    async def main() -> tuple[int, str]:
        value = await invocation.call(lambda: 7, {}, daemon=True)
        try:
            await invocation.call(boom, {}, daemon=True)
        except ValueError as exc:
            return value, str(exc)
        return value, ""

    assert asyncio.run(main()) == (7, "boom")
