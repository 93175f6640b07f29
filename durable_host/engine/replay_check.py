"""Replay stored histories against new code before it ships: ``replay-check``. Writes nothing.

``python -m durable_host replay-check --app-dir NEW [--store S] [--instances running|all|ID...]
[--json]`` loads the new code and replays each chosen instance's stored history through it
with the host's own walk (``shim.Shim``: the same ids, types and names the engine checks at
every episode), so an instance that the deploy would break is named before the deploy. Each
instance gets one verdict:

* ``ok`` - the code asks for exactly what the history holds (it may ask for more after the
  history's end: that is new work, which the host would schedule);
* ``nondeterministic`` - a recorded scheduling event that the code now asks for differently,
  or no longer asks for: ``event``, ``expected`` and ``actual`` name them in the words of the
  host's own ``NonDeterminismError``, and ``message`` is that error's text;
* ``fails`` - the code raises while replaying the history, having asked for every call it
  holds (the instance would fail); code that raises before asking for a recorded call is
  ``nondeterministic``, as the host itself names it;
* ``missing`` - the orchestrator is gone from the new code (or disabled);
* ``other-version`` - the new code's ``versionMatchStrategy`` does not run the instance's
  version (``versioning.py``): it is not replayed. It counts as a failure only under
  ``versionFailureStrategy`` ``Fail``; under ``Reject`` the instance waits, untouched, for a
  host of its version (the side-by-side deploy);
* ``unreadable`` - its stored history cannot be decoded;
* ``not-found`` - an instance named on the command line does not exist.

The exit status is 1 when any verdict is a failure, else 0 (2: bad usage, store or app).
Default selection: every orchestration not yet ended (Pending, Running, Suspended,
ContinuedAsNew); ``all`` adds the ended ones. A pending instance (or one between executions
of a continue-as-new) has no history of the execution it will run; only its orchestrator and
version are checked.

The store is opened read-only (no lock, no lease, no index build), so the check runs beside
a host that serves the hub; the store is read one page of instances at a time.

``replay`` is the pure core: the golden corpus test (``tests/replay``) replays its recorded
histories through it too, so both check the same thing the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from durable_host.core import wire
from durable_host.core.history import Event, EventType
from durable_host.core.orchestration import missing_orchestrator_message
from durable_host.core.records import TERMINAL, InstanceRecord, Query, RuntimeStatus
from durable_host.core.shim import InstanceView, NonDeterminismError, Shim
from durable_host.core.versioning import FailureStrategy, MatchStrategy, VersionPolicy
from durable_host.store.base import CorruptHistoryError, Store

OK = "ok"
NONDETERMINISTIC = "nondeterministic"
FAILS = "fails"
MISSING = "missing"
OTHER_VERSION = "other-version"
UNREADABLE = "unreadable"
NOT_FOUND = "not-found"

NOT_ENDED = tuple(s for s in RuntimeStatus if s not in TERMINAL)
_NOT_REPLAYED = (RuntimeStatus.PENDING, RuntimeStatus.CONTINUED_AS_NEW)
PAGE = 100

# The two shapes of ``shim.NonDeterminismError``: a changed action, or a recorded one the code
# no longer asks for. Parsed (not rebuilt) so the verdict names exactly what the host would say.
_CHANGED = re.compile(
    r"history event (?P<event>.+?) was expected, but the orchestrator code now schedules"
    r" (?P<actual>.+?) with sequence id \d+\."
)
_DROPPED = re.compile(
    r"history event (?P<event>.+?) was expected, but the orchestrator code no longer"
    r" schedules it \((?P<actual>.+?)\)\."
)
_EVENT = re.compile(r"(?P<event>\S+ #\S+) \((?P<what>.*)\)")

Handle = Callable[[str], str]


@dataclass(slots=True)
class Verdict:
    """One instance's answer (``--json`` prints these fields)."""

    instance_id: str
    verdict: str
    name: str = ""
    status: str = ""
    version: str = ""
    event: str | None = None  # the recorded scheduling event, e.g. ``TaskScheduled #0``
    expected: str | None = None  # what history holds there, e.g. ``activity 'a'``
    actual: str | None = None  # what the code does now, e.g. ``a call to activity 'b'``
    message: str | None = None
    failure: bool = False

    def line(self) -> str:
        head = f"{self.verdict:<16} {self.instance_id} ({self.name or '?'}"
        head += f", {self.status}" if self.status else ""
        head += f", version '{self.version}')" if self.version else ")"
        if self.verdict == NONDETERMINISTIC and self.event:
            return f"{head}: {self.event}: history expected {self.expected}, the code now: {self.actual}"
        return f"{head}: {self.message}" if self.message else head


# --- the pure core -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replayed:
    """A replay's outcome: the walk (its ``new_events`` are what the code asks for beyond
    the history), the code's decisions, and whether every action it listed resolved."""

    shim: Shim
    decided: wire.OrchestratorState
    resolved: bool


def replay(
    handle: Handle,
    instance_id: str,
    events: list[Event],
    parent_instance_id: str | None = None,
    default_version: str | None = None,
) -> Replayed:
    """Replay ``events`` (one execution's history, without its ExecutionCompleted) through
    ``handle`` as a full, plain replay, as the extension hands a history to the SDK, and walk
    every action the code lists against them. Raises ``NonDeterminismError`` naming the
    first mismatch. Code that raises is an answer (``decided.error``/``raw_failure``)."""
    started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
    execution_id = (started.get("OrchestrationInstance") or {}).get("ExecutionId") or ""
    request = wire.encode_orchestration_request(
        instance_id, events, started.get("Input"), parent_instance_id
    )
    try:
        decided = wire.decode_orchestrator_state(handle(request))
    except Exception as exc:  # noqa: BLE001 - the user's code failing is the answer
        decided = wire.decode_orchestrator_exception(str(exc))
    view = InstanceView(instance_id, RuntimeStatus.RUNNING, execution_id, events, started["Name"])
    shim = Shim(view, events, events[-1]["Timestamp"], execution_id, default_version)
    if decided.raw_failure is not None:
        return Replayed(shim, decided, False)  # no state: nothing to walk (as the engine)
    resolved = shim.walk(decided.actions)
    shim.check_replayed()
    return Replayed(shim, decided, resolved)


def nondeterminism(verdict: Verdict, error: NonDeterminismError) -> Verdict:
    """``verdict`` as ``nondeterministic``, its event, expected and actual action parsed
    from the host's own error (the whole text in ``message`` whatever its shape)."""
    text = str(error)
    verdict.verdict, verdict.message, verdict.failure = NONDETERMINISTIC, text, True
    match = _CHANGED.search(text) or _DROPPED.search(text)
    if match is not None:
        described = _EVENT.fullmatch(match["event"])
        verdict.event = described["event"] if described else match["event"]
        verdict.expected = described["what"] if described else match["event"]
        verdict.actual = match["actual"]
    return verdict


def judge(
    record: InstanceRecord,
    events: list[Event],
    handle: Handle | None,
    policy: VersionPolicy,
) -> Verdict:
    """The verdict on one instance (its row and its current execution's stored history) for
    code whose orchestrator is ``handle`` (None: missing) and whose version policy is
    ``policy``. Pure but for running the orchestrator's code."""
    verdict = Verdict(record.instance_id, OK, record.name, record.status, record.version or "")
    if policy.match != MatchStrategy.NONE and not policy.allows(record.version):
        verdict.verdict = OTHER_VERSION
        verdict.failure = policy.failure == FailureStrategy.FAIL
        verdict.message = f"this code runs {policy.describe()}"
        return verdict
    if handle is None:
        verdict.verdict, verdict.failure = MISSING, True
        verdict.message = missing_orchestrator_message(record.name)
        return verdict
    if record.status in _NOT_REPLAYED:
        # Its next episode starts an execution (a start, a continue-as-new, a rewind's
        # restart) from its start message: no stored history of it exists yet.
        verdict.message = f"{record.status}: its next execution starts afresh, nothing to replay"
        return verdict
    replayed = [e for e in events if e["EventType"] != EventType.EXECUTION_COMPLETED]
    if not any(e["EventType"] == EventType.EXECUTION_STARTED for e in replayed):
        verdict.message = "not started yet: nothing to replay"
        return verdict
    try:
        decided = replay(
            handle, record.instance_id, replayed, record.parent_instance_id, policy.default_version
        ).decided
    except NonDeterminismError as exc:
        return nondeterminism(verdict, exc)
    failure = decided.raw_failure or decided.error
    if failure is not None and record.status not in TERMINAL:
        verdict.verdict, verdict.failure = FAILS, True
        verdict.message = f"the code raises while replaying: {failure}"
    return verdict


def summary(verdicts: Iterable[Verdict]) -> dict[str, Any]:
    """Counts per verdict and whether any is a failure (the exit status)."""
    counts: dict[str, int] = {}
    failed = False
    for verdict in verdicts:
        counts[verdict.verdict] = counts.get(verdict.verdict, 0) + 1
        failed = failed or verdict.failure
    return {"counts": counts, "failed": failed}


# --- the IO shell --------------------------------------------------------------------------


async def records(store: Store, selection: list[str]) -> AsyncIterator[InstanceRecord | str]:
    """The chosen instances' rows, a page at a time; a named instance that does not exist
    comes as its id. ``selection``: ``["running"]`` (default), ``["all"]`` or ids."""
    if selection in ([], ["running"], ["all"]):
        statuses = NOT_ENDED if selection != ["all"] else ()
        continuation = None
        while True:
            page = await store.query(
                Query(statuses=tuple(statuses), top=PAGE, continuation=continuation)
            )
            for record in page.records:
                yield record
            continuation = page.continuation
            if not continuation:
                return
    for instance_id in selection:
        named = await store.get_instance(instance_id)
        yield named if named is not None and not _is_entity(named) else instance_id


def _is_entity(record: InstanceRecord) -> bool:
    return record.instance_id.startswith("@")


async def check(
    store: Store,
    orchestrator: Callable[[str], Handle | None],
    policy: VersionPolicy,
    selection: list[str],
) -> AsyncIterator[Verdict]:
    """Each chosen instance's verdict; ``orchestrator(name)`` is the new code's handle."""
    async for found in records(store, selection):
        if isinstance(found, str):
            yield Verdict(found, NOT_FOUND, message="no such orchestration instance", failure=True)
            continue
        try:
            events = await store.get_history(found.instance_id)
        except CorruptHistoryError as exc:
            verdict = Verdict(found.instance_id, UNREADABLE, found.name, found.status)
            verdict.message, verdict.failure = str(exc), True
            yield verdict
            continue
        yield judge(found, events, orchestrator(found.name), policy)


def report_json(verdicts: list[Verdict]) -> str:
    return json.dumps({**summary(verdicts), "instances": [asdict(v) for v in verdicts]}, indent=2)


def report_text(verdicts: list[Verdict]) -> list[str]:
    result = summary(verdicts)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(result["counts"].items())) or "no instances"
    tail = "would fail: do not deploy" if result["failed"] else "safe to deploy"
    return [v.line() for v in verdicts] + [f"replay-check: {counts}; {tail}"]
