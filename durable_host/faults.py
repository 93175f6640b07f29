"""Deterministic fault injection for durability tests: one plan format, two effects.

A plan is ``"point[@n][,point[@n]...]"``: the fault fires the n-th time (default: the
first) execution passes ``point``; a point listed more than once fires at each listed
pass. Tests use plans instead of sleeping and hoping to land in a window. A ``FaultPlan``
counts passes per point; a point it does not name costs a dictionary lookup and nothing
else.

* ``DURABLE_HOST_FAULTS`` (``PROCESS_FAULTS``) is the process's plan, read once at import:
  ``hit(point)`` kills the host with SIGKILL at a planned pass (``kill``).
* ``DURABLE_HOST_AZURE_FAULTS`` (``AZURE_FAULTS``) plans lost responses: the Azure store
  owns a ``FaultPlan.from_env(AZURE_FAULTS)`` per store object (tests build several stores
  in one process, each with its own plan) and calls ``lose(point, error)`` after each
  successful write at ``point`` (``commit``, ``complete``, ``send``, ``stage``), which
  raises ``error`` at a planned pass as if the response had been lost on the way back.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from typing import Self

PROCESS_FAULTS = "DURABLE_HOST_FAULTS"
AZURE_FAULTS = "DURABLE_HOST_AZURE_FAULTS"

log = logging.getLogger("durable_host.faults")


def parse(spec: str) -> dict[str, frozenset[int]]:
    """``"point[@n],..."`` -> the passes (1-based) at which each point fires."""
    plan: dict[str, set[int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, count = item.partition("@")
        plan.setdefault(point, set()).add(int(count or 1))
    return {point: frozenset(passes) for point, passes in plan.items()}


class FaultPlan:
    """Where faults fire (``parse``) and how often each point has been passed."""

    def __init__(self, spec: str = "") -> None:
        self._plan = parse(spec)
        self._seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls, variable: str) -> Self:
        return cls(os.environ.get(variable, ""))

    def due(self, point: str) -> int:
        """Count one pass through ``point``: its number if the plan fires there, else 0."""
        if point not in self._plan:
            return 0
        self._seen[point] += 1
        return self._seen[point] if self._seen[point] in self._plan[point] else 0

    def kill(self, point: str) -> None:
        """SIGKILL this process at a planned pass (no cleanup, no flush but stderr's)."""
        if passed := self.due(point):
            sys.stderr.write(f"fault injection: SIGKILL at {point}@{passed}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def lose(self, point: str, error: Callable[[str], BaseException]) -> None:
        """At a planned pass, raise ``error`` as if the response of a write had been lost."""
        if passed := self.due(point):
            log.warning("fault injection: response of %s@%d lost", point, passed)
            raise error(f"fault injection: response of {point} lost")


_process = FaultPlan.from_env(PROCESS_FAULTS)


def hit(point: str) -> None:
    """The process plan's kill point ``point`` (``DURABLE_HOST_FAULTS``)."""
    _process.kill(point)
