"""Deterministic crash points for durability tests.

``DURABLE_HOST_FAULTS="point[@n][,point[@n]...]"`` makes the host kill itself with
SIGKILL the n-th time (default: the first) execution reaches ``hit(point)``. Tests use
this instead of sleeping and hoping to land in a window. Without the variable, ``hit``
is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

_plan: dict[str, int] = {}
_seen: Counter[str] = Counter()


def _load() -> None:
    for item in filter(None, os.environ.get("DURABLE_HOST_FAULTS", "").split(",")):
        point, _, count = item.strip().partition("@")
        _plan[point] = int(count or 1)


def hit(point: str) -> None:
    if point not in _plan:
        return
    _seen[point] += 1
    if _seen[point] == _plan[point]:
        sys.stderr.write(f"fault injection: SIGKILL at {point}@{_plan[point]}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


_load()
