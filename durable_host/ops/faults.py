"""Fault injection for durability tests: one plan format, three effects.

A plan is ``"rule[,rule...]"``; a rule is ``point@n`` (fires the n-th time execution
passes ``point``; ``point`` alone means ``point@1``; a point listed more than once fires at
each listed pass) or ``point%p`` (fires at each pass with probability p percent, drawn
from a generator seeded by ``DURABLE_HOST_FAULT_SEED``, default 0, so a failing campaign
run can be replayed). A point may be a pattern with ``*`` (``*.after%5``). Tests use plans
instead of sleeping and hoping to land in a window. A point no rule names costs a
dictionary lookup (plus one pattern match per pattern rule) and nothing else.

* ``DURABLE_HOST_FAULTS`` (``PROCESS_FAULTS``) is the process's plan, read once at import:
  ``hit(point)`` kills the host with SIGKILL at a planned pass (``kill``).
* ``DURABLE_HOST_AZURE_FAULTS`` (``AZURE_FAULTS``) plans lost responses: the Azure store
  owns a ``FaultPlan.from_env(AZURE_FAULTS)`` per store object (tests build several stores
  in one process, each with its own plan) and calls ``lose(point, error)`` after each
  successful write at ``point`` (``commit``, ``complete``, ``send``, ``stage``), which
  raises ``error`` at a planned pass as if the response had been lost on the way back.
* ``DURABLE_HOST_STORE_FAULTS`` (``STORE_FAULTS``) plans failed SQLite transactions:
  ``<operation>.before`` fails a transaction before its COMMIT (nothing applied),
  ``<operation>.after`` reports a failure after the COMMIT applied (``store/sqlite.py``
  names the operations). ``DURABLE_HOST_STORE_FULL`` (``STORE_FULL``) names a switch file:
  while it exists, every SQLite write fails as on a full disk.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import random
import signal
import sys
from collections import Counter
from collections.abc import Callable
from typing import Self

PROCESS_FAULTS = "DURABLE_HOST_FAULTS"
AZURE_FAULTS = "DURABLE_HOST_AZURE_FAULTS"
STORE_FAULTS = "DURABLE_HOST_STORE_FAULTS"
STORE_FULL = "DURABLE_HOST_STORE_FULL"
FAULT_SEED = "DURABLE_HOST_FAULT_SEED"

log = logging.getLogger("durable_host.faults")


def parse(spec: str) -> dict[str, frozenset[int]]:
    """``"point[@n],..."`` -> the passes (1-based) at which each point fires."""
    return _parse(spec)[0]


def _parse(spec: str) -> tuple[dict[str, frozenset[int]], dict[str, float]]:
    passes: dict[str, set[int]] = {}
    rates: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if "%" in item:
            point, _, percent = item.partition("%")
            rates[point] = float(percent) / 100.0
            continue
        point, _, count = item.partition("@")
        passes.setdefault(point, set()).add(int(count or 1))
    return {point: frozenset(n) for point, n in passes.items()}, rates


class FaultPlan:
    """Where faults fire (see the module docstring) and how often each point was passed."""

    def __init__(self, spec: str = "", seed: int | None = None) -> None:
        self._plan, self._rates = _parse(spec)
        self._patterns = [p for p in (*self._plan, *self._rates) if "*" in p]
        if seed is None:
            seed = int(os.environ.get(FAULT_SEED, "0") or 0)
        self._random = random.Random(seed)
        self._seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls, variable: str) -> Self:
        return cls(os.environ.get(variable, ""))

    def __bool__(self) -> bool:
        return bool(self._plan or self._rates)

    def due(self, point: str) -> int:
        """Count one pass through ``point``: its number if the plan fires there, else 0."""
        rule = point
        if point not in self._plan and point not in self._rates:
            rule = next((p for p in self._patterns if fnmatch.fnmatchcase(point, p)), "")
            if not rule:
                return 0
        self._seen[point] += 1
        seen = self._seen[point]
        if seen in self._plan.get(rule, ()):
            return seen
        rate = self._rates.get(rule, 0.0)
        return seen if rate and self._random.random() < rate else 0

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

    def fail(self, point: str, error: BaseException) -> None:
        """At a planned pass, raise ``error`` (a storage call that failed at ``point``)."""
        if passed := self.due(point):
            log.warning("fault injection: %s@%d fails: %s", point, passed, error)
            raise error


_process = FaultPlan.from_env(PROCESS_FAULTS)


def hit(point: str) -> None:
    """The process plan's kill point ``point`` (``DURABLE_HOST_FAULTS``)."""
    _process.kill(point)
