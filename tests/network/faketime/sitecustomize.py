"""Loaded (by ``PYTHONPATH``) into a host the network campaign runs under libfaketime.

libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` makes ``clock_nanosleep`` fail
with EINVAL whatever the offset, so Python's ``time.sleep`` raises ``OSError`` in that
process (the host never calls it; an app's activity may: the ledger app's ``gated_step``
does). Here ``time.sleep`` waits on a lock instead, which that libfaketime leaves alone.
Nothing else changes.
"""

import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep
