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
* ``Silence`` tells a dead member from a live one without trusting clocks: a member whose
  heartbeat has not changed (its ``beat`` token) for ``silence`` seconds of the observer's
  own monotonic clock is dead. A member first seen is given the full ``silence``; an
  observer that stalled sees the tokens changed when it looks again, so only the observed
  member's stall counts. A member judged dead stays so (for a claim check) until it beats
  again, or for an hour.
* ``StoreTime`` and ``fresh``: which heartbeats have not expired, and how old a claim is,
  are judged on the store's clock, never on a host's wall clock (which may be an hour
  off). A host reads the store's clock from what the store stamps on its own writes (the
  Last-Modified of its heartbeat blob on Azure), carries the reading forward on its
  monotonic clock, and compares it with stamps the store wrote too (another heartbeat's
  Last-Modified, a claimed work item's Timestamp). PostgreSQL needs neither: its
  statements compare with the server's ``clock_timestamp()`` themselves.
* Versions side by side (``docs/versioning.md``, "Side by side on the Azure store"): a
  partition holds instances of every version, and its owner may run only those its
  version policy allows. ``handovers`` picks the partitions a member hands to a live member
  of another version because it left instances of that version untouched there (held at
  least ``dwell`` seconds first, so its own work there runs too); the handed-over partition
  carries the version it was handed to (``wanted``), and ``plan`` lets a member that may
  run that version take it beyond its share, while the others leave it alone. A partition
  held less than ``dwell`` seconds is not released to balance (``keep``): a handover is not
  undone before its instances ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from durable_host.core.versioning import MatchStrategy, VersionPolicy

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
    beat: str = ""  # what changes at every heartbeat (an ETag, an expiry); "" not known

    def runs(self, version: str) -> bool:
        """May this member run an instance of ``version``? Its heartbeat's ``match`` (a
        ``versionMatchStrategy``; absent: it checks nothing) with its ``version``."""
        match = self.extra.get("match", "")
        try:
            strategy = MatchStrategy(match) if match else MatchStrategy.NONE
        except ValueError:
            return False  # a strategy this host does not know: do not count on it
        return VersionPolicy(self.version or None, strategy).allows(version)


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
    wanted: Mapping[int, str] | None = None,
    runs: Callable[[str], bool] | None = None,
    others_run: Callable[[str], bool] | None = None,
    keep: Sequence[int] = (),
) -> Plan:
    """``me``'s move given the live ``members`` (draining ones left out) and who holds
    which unit now (None: free; a holder that is no live member counts as free).

    ``wanted``: free units handed over for a version (unit -> version); ``runs``: may ``me``
    run a version; ``others_run``: may another live member run it; ``keep``: units of
    ``me`` not to release for balance yet (taken less than a dwell ago)."""
    wanted = wanted or {}
    runs = runs or (lambda _v: True)
    others_run = others_run or (lambda _v: False)
    live = [m for m in members if m != me] + ([] if draining else [me])
    share = shares(units, live, holdings).get(me, 0)
    mine = sorted(u for u in units if holdings.get(u) == me)
    if draining:
        return Plan(release=tuple(mine[::-1]), share=share)
    kept = set(keep)
    if len(mine) > share:
        spare = [u for u in mine if u not in kept]
        surplus = len(mine) - share
        release = tuple(spare[::-1][:surplus])
        if release:
            return Plan(release=release, share=share)
    live_set = set(live)
    free = [u for u in sorted(units) if holdings.get(u) not in live_set]
    # Handed over for a version this member runs: taken whatever its share.
    called = [u for u in free if u in wanted and runs(wanted[u])]
    # Handed over for a version another live member runs and this one does not: its.
    free = [
        u
        for u in free
        if u not in called and not (u in wanted and others_run(wanted[u]) and not runs(wanted[u]))
    ]
    need = max(0, share - len(mine) - len(called))
    # Free units first: nobody holds them; a dead member's lease lapses by itself.
    free.sort(key=lambda u: (holdings.get(u) is not None, u))
    return Plan(take=tuple(called) + tuple(free[:need]), share=share)


def handovers(
    parked: Mapping[int, Sequence[str]],
    members: Sequence[Member],
    me: str,
    held_for: Mapping[int, float],
    dwell: float,
    limit: int = 1,
) -> dict[int, str]:
    """Units ``me`` hands over now (unit -> the version it is handed to): up to ``limit``
    units (lowest first) it has held for ``dwell`` seconds at least where it left
    instances of a version untouched that a live, non-draining other member runs (the
    oldest such version first). One a round by default: a member that parked work
    everywhere does not give up every unit at once, so its own version keeps running."""
    others = [m for m in members if m.id != me and not m.draining]
    out: dict[int, str] = {}
    for unit in sorted(parked):
        if held_for.get(unit, -1.0) < dwell:
            continue  # not held, or taken too recently: its own work runs first
        for version in sorted(set(parked[unit])):
            if any(m.runs(version) for m in others):
                out[unit] = version
                break
        if len(out) >= limit:
            break
    return out


class Silence:
    """Which members' heartbeats stopped (see the module docstring); ``now`` is the
    caller's monotonic clock, so the rule is testable without sleeping."""

    FORGET_AFTER = 3600.0

    def __init__(self, silence: float) -> None:
        self.silence = silence
        self._seen: dict[str, tuple[str, float]] = {}  # member -> (beat token, since when)
        self._dead: dict[str, float] = {}  # member -> when it was judged dead

    def observe(self, members: Sequence[Member], me: str, now: float) -> set[str]:
        """The members (not ``me``) silent for ``silence`` seconds, from this listing."""
        listed = set()
        for member in members:
            listed.add(member.id)
            seen = self._seen.get(member.id)
            if seen is None or seen[0] != member.beat or not member.beat:
                self._seen[member.id] = (member.beat, now)
                self._dead.pop(member.id, None)
        for gone in set(self._seen) - listed:
            del self._seen[gone]  # its heartbeat expired or was removed: no member now
        dead = {
            m
            for m, (_token, since) in self._seen.items()
            if m != me and now - since >= self.silence
        }
        for name in dead:
            self._dead.setdefault(name, now)
        for name, judged in list(self._dead.items()):
            if now - judged > self.FORGET_AFTER:
                del self._dead[name]
        return dead

    def is_dead(self, member: str) -> bool:
        """Judged dead by a listing and not seen beating since (claims of it do not count)."""
        return member in self._dead


class StoreTime:
    """The store's clock as this host reads it (see the module docstring): the last
    reading, carried forward on the monotonic clock. ``now`` is None before a reading."""

    def __init__(self) -> None:
        self._reading: tuple[float, float] | None = None  # (store seconds, monotonic)

    def read(self, stamped: float, sent: float, answered: float, resolution: float = 1.0) -> None:
        """A write sent at ``sent`` and answered at ``answered`` (monotonic seconds) was
        stamped ``stamped`` by the store, truncated to ``resolution`` seconds: the store's
        time was ``stamped + resolution / 2`` (within half the resolution) halfway through
        the request (within half its round trip)."""
        self._reading = (stamped + resolution / 2, (sent + answered) / 2)

    def now(self, monotonic: float) -> float | None:
        """The store's time at this host's ``monotonic`` time (None: never read)."""
        if self._reading is None:
            return None
        stamped, at = self._reading
        return stamped + (monotonic - at)


def fresh(beats: Mapping[str, tuple[float, float]], now: float | None) -> set[str]:
    """The members whose heartbeat has not expired: ``beats`` maps a member to (when the
    store stamped its last heartbeat, its time to live), ``now`` is the store's time as
    ``StoreTime`` reads it; without a reading, the newest stamp listed stands for it (a
    lower bound of the store's time: it may keep an expired member a while, never drop a
    live one)."""
    if not beats:
        return set()
    if now is None:
        now = max(stamped for stamped, _ttl in beats.values())
    return {m for m, (stamped, ttl) in beats.items() if stamped + ttl >= now}
