"""Who runs what when several hosts share one task hub: pure decisions, no IO.

* ``partition_of`` maps an instance id to one of ``count`` partitions by FNV-1a (32 bit)
  of its UTF-8 bytes: stable across processes, machines and Python versions (Python's own
  ``hash`` of a string is salted per process, so two hosts would disagree).
* ``shares`` splits the units (partitions) fairly among the live members: each gets
  ``len(units) // len(members)``, and the remainder goes one each to the members that hold
  most now (ties by member id), so a balanced hub stays as it is and every member computes
  the same answer from the same view.
* ``plan`` is one member's move in a round of balancing: which units to take (free ones,
  or ones whose holder is no live member - its lease lapses by itself - lowest first) and
  which to release (those above its share, highest first). A member never takes a unit a
  live member holds: the holder above its share releases it at its own next round, and
  the member short of its share takes it at the round after. A draining member's share is
  zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MIN_PARTITIONS, MAX_PARTITIONS, DEFAULT_PARTITIONS = 1, 16, 4

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def partition_of(instance_id: str, count: int) -> int:
    """The partition (0 .. count-1) that owns ``instance_id``."""
    if count < 1:
        raise ValueError(f"a task hub has at least one partition, not {count}")
    return fnv1a_32(instance_id.encode("utf-8")) % count


def check_partition_count(value: object) -> int:
    """host.json's ``partitionCount``: an integer from 1 to 16 (ValueError otherwise)."""
    count = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.strip().isdigit():
        count = int(value)
    if count is None:
        raise ValueError(f"partitionCount must be an integer from 1 to 16, not {value!r}")
    if not MIN_PARTITIONS <= count <= MAX_PARTITIONS:
        raise ValueError(f"partitionCount must be an integer from 1 to 16, not {count}")
    return count


@dataclass(frozen=True)
class Plan:
    """One member's move: units to take now, units to give back now."""

    take: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    share: int = 0


@dataclass(frozen=True)
class Member:
    """A host as its heartbeat describes it."""

    id: str
    version: str = ""
    draining: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)


def shares(
    units: Sequence[int], members: Sequence[str], holdings: Mapping[int, str | None]
) -> dict[str, int]:
    """How many units each live member should hold (see the module docstring)."""
    if not members:
        return {}
    unique = sorted(set(members))
    base, extra = divmod(len(units), len(unique))
    held = {m: 0 for m in unique}
    for unit in units:
        holder = holdings.get(unit)
        if holder in held:
            held[holder] += 1
    order = sorted(unique, key=lambda m: (-held[m], m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}


def plan(
    units: Sequence[int],
    members: Sequence[str],
    holdings: Mapping[int, str | None],
    me: str,
    *,
    draining: bool = False,
) -> Plan:
    """``me``'s move given the live ``members`` (draining ones left out) and who holds
    which unit now (None: free; a holder that is no live member counts as free)."""
    live = [m for m in members if m != me] + ([] if draining else [me])
    share = shares(units, live, holdings).get(me, 0)
    mine = sorted(u for u in units if holdings.get(u) == me)
    if len(mine) > share:
        return Plan(release=tuple(mine[share:][::-1]), share=share)
    need = share - len(mine)
    live_set = set(live)
    free = [u for u in sorted(units) if holdings.get(u) not in live_set]
    # Free units first: nobody holds them; a dead member's lease lapses by itself.
    free.sort(key=lambda u: (holdings.get(u) is not None, u))
    return Plan(take=tuple(free[:need]), share=share)
