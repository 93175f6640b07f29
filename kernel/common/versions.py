"""Version strings as the Durable runtime compares them. Pure.

The app is deployed with an orchestration version (host.json ``defaultVersion``); every
instance keeps the version it was created with (``context.version``), and the runtime decides
which deployment may run it by comparing versions (``versionMatchStrategy``). An orchestrator
that branches on its version must compare the way the runtime does, or it would take the new
path where the runtime still routes old instances: ``compare`` is the runtime's rule.

* Blank versions are equal to each other and older than any other version.
* Two versions of 2 to 4 non-negative integer parts (``System.Version``) compare part by part,
  a missing part lower than any present one (``1.0 < 1.0.0``).
* Anything else compares as case-insensitive ordinal strings (so ``"10" < "9"``: give
  versions at least two parts, ``"1.0"``, ``"2.0"``).
"""

from __future__ import annotations

import re

_PART = re.compile(r"\s*\+?\d+\s*")


def _parts(text: str) -> tuple[int, ...] | None:
    pieces = text.split(".")
    if not 2 <= len(pieces) <= 4 or not all(_PART.fullmatch(p) for p in pieces):
        return None
    values = tuple(int(p) for p in pieces)
    if any(v >= 2**31 for v in values):
        return None
    return values + (-1,) * (4 - len(values))


def compare(source: str | None, other: str | None) -> int:
    """Negative, zero or positive as ``source`` is older than, equal to or newer than ``other``."""
    a, b = (source or "").strip(), (other or "").strip()
    if not a or not b:
        return (bool(a) > bool(b)) - (bool(a) < bool(b))
    parsed_a, parsed_b = _parts(source or ""), _parts(other or "")
    if parsed_a is not None and parsed_b is not None:
        return (parsed_a > parsed_b) - (parsed_a < parsed_b)
    upper_a, upper_b = (source or "").upper(), (other or "").upper()
    return (upper_a > upper_b) - (upper_a < upper_b)


def at_least(version: str | None, since: str) -> bool:
    """Does an instance of ``version`` follow the behaviour introduced in ``since``?"""
    return compare(version, since) >= 0
