"""Cheaper replays that compute exactly what the SDK computes. Pure, but for ``install``.

The Python SDK replays an orchestrator's whole history on every episode, and most of that
cost is not the user's code: it builds a ``HistoryEvent`` for every event and parses every
timestamp with ``dateutil`` (~35 us each). Three equivalences make a step cheap:

* **Only the events the SDK reads** (``sdk_history``). ``TaskOrchestrationExecutor``
  acts on ExecutionStarted (starts the generator; its ``Version``; ``history[1].IsPlayed``),
  OrchestratorStarted (``current_utc_datetime``; the *last* one is the replay boundary),
  the completions TaskCompleted/TaskFailed/SubOrchestrationInstanceCompleted/-Failed,
  TimerFired and EventRaised (resolve tasks by id or name), ContinueAsNew (resets state)
  and EventSent when its ``EventId`` is an open entity *call* (re-keyed by request id).
  Every other event falls through ``process_event`` untouched, so dropping it changes
  nothing the SDK computes: the order of the kept events, the position of the last
  OrchestratorStarted relative to them, the first OrchestratorStarted and ExecutionStarted
  (kept at indexes 0 and 1) all stay the same. Signal EventSents are dropped too: a signal
  never opens a task under its id. What does change is ``context.histories``, which
  orchestrator code could read: see the watch below.
* **Timestamps parsed without dateutil** (``install``). The host writes every timestamp as
  ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; for exactly that form ``fast_timestamp`` builds the same
  value dateutil builds (same instant, same kind of ``tzinfo``, checked against dateutil at
  install time), and anything else still goes to dateutil.
* **No re-encoding of a hot history** (``HistoryText``): the SDK takes its history as JSON
  text, and a history only grows by appending, so the text of the events the SDK reads is
  kept with the cached history and each episode encodes only the events it adds. The text
  is ``json.dumps`` of ``sdk_history(events)`` byte for byte (each event encoded alone and
  joined with ``", "``, as ``json.dumps`` joins a list), because ``sdk_history`` keeps or
  drops every event on its own.
* **No re-read of a hot history** (``HistoryCache``): the engine keeps the stored history of
  instances that will be woken again soon (an activity or message is on its way), keyed by
  what the fresh status row says (execution id and last update), so a stale entry is never
  used; waiting instances are evicted, and the total is bounded in events. The entry also
  holds the instance's live SDK session (``sessions.py``), which skips the replay.

Both ``sdk_history`` and a session change what ``context.histories`` holds while orchestrator
code runs (fewer events; a session's past steps saw the history up to their own episode). So
the host watches reads of it (``watch_history_reads``): an episode in which code outside the
SDK's own modules read ``context.histories`` is thrown away and decided again by a plain
replay of the whole stored history, what the extension hands the SDK, and a session of that
instance replays in full from then on. Nothing such code sees differs from the extension.

The golden-history equivalence tests replay every scenario both ways and compare the SDK's
raw answers, ``new_uuid`` values and the episodes' events byte for byte.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable_host.core.history import Event, EventType

_READ_BY_SDK = frozenset(
    {
        EventType.EXECUTION_STARTED,
        EventType.ORCHESTRATOR_STARTED,
        EventType.TASK_COMPLETED,
        EventType.TASK_FAILED,
        EventType.SUB_ORCHESTRATION_COMPLETED,
        EventType.SUB_ORCHESTRATION_FAILED,
        EventType.TIMER_FIRED,
        EventType.EVENT_RAISED,
        EventType.CONTINUE_AS_NEW,
    }
)
_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def sdk_history(events: Iterable[Event]) -> list[Event]:
    """The events ``TaskOrchestrationExecutor`` acts on, in their order (see module doc)."""
    return [e for e in events if e["EventType"] in _READ_BY_SDK or _is_entity_call(e)]


def _is_entity_call(event: Event) -> bool:
    if event["EventType"] != EventType.EVENT_SENT:
        return False
    # A signal's request carries "signal": true; a call's does not (protocol §3).
    try:
        request = json.loads(event.get("Input") or "{}")
    except ValueError:
        return True  # not ours to judge: hand it over as it is
    return not (isinstance(request, dict) and request.get("signal"))


class HistoryText:
    """The JSON text of ``sdk_history`` of the first ``covers`` events of a history, grown by
    appending. One instance's episodes extend it one at a time (not thread-safe)."""

    __slots__ = ("_parts", "_text", "covers")

    def __init__(self) -> None:
        self.covers = 0
        self._parts: list[str] = []
        self._text: str | None = ""

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.covers += 1
            if event["EventType"] in _READ_BY_SDK or _is_entity_call(event):
                self._parts.append(json.dumps(event))
                self._text = None

    def text(self, more: Iterable[Event] = ()) -> str:
        """The list's text (without brackets), with ``more`` events appended to it only."""
        if self._text is None:
            # Joined once per episode that changed it, not re-encoded.
            self._text = ", ".join(self._parts)
        extra = [json.dumps(e) for e in sdk_history(more)]
        if not extra:
            return self._text
        return ", ".join([self._text, *extra]) if self._text else ", ".join(extra)


# --- timestamps ------------------------------------------------------------------------

_original_parse: Callable[[str], datetime] | None = None


def fast_timestamp(text: str, fallback: Callable[[str], datetime], tzinfo: Any) -> datetime:
    """``fallback(text)`` computed cheaply when ``text`` has the host's canonical form."""
    if isinstance(text, str) and _CANONICAL.fullmatch(text):
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=tzinfo)
    return fallback(text)


def install(enabled: bool = True) -> bool:
    """Swap the SDK's timestamp parser for ``fast_timestamp`` (or back); True if active.
    Watches reads of ``context.histories`` either way (``watch_history_reads``).

    Installs only when the fast path provably agrees with dateutil on this machine: the
    ``tzinfo`` dateutil gives ``Z`` depends on the local zone (``tzlocal()`` when the
    local zone is called UTC, else ``tzutc()``), so it is taken from dateutil itself and
    the fast path is refused where a local zone with daylight saving could change it.
    """
    global _original_parse
    watch_history_reads()
    # The submodule, not the class the package re-exports under the same name.
    module: Any = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")

    if _original_parse is None:
        _original_parse = module.dt_parse
    if not enabled:
        module.dt_parse = _original_parse
        return False
    original = _original_parse
    if "UTC" in time.tzname and time.daylight:
        return False
    reference = original("2000-01-01T00:00:00.000000Z")
    tzinfo = reference.tzinfo
    probes = ("2024-02-29T23:59:59.999999Z", "1999-12-31T00:00:00.000001Z")
    for probe in probes:
        fast = fast_timestamp(probe, original, tzinfo)
        slow = original(probe)
        if fast != slow or type(fast.tzinfo) is not type(slow.tzinfo):
            return False

    def parse(text: str) -> datetime:
        return fast_timestamp(text, original, tzinfo)

    module.dt_parse = parse
    return True


# --- reads of context.histories ------------------------------------------------------------

_reads = threading.local()  # an episode runs on one thread, start to end
_SDK_CORE = ("azure.durable_functions.models", "azure.durable_functions.orchestrator")
_watching = False


def watch_history_reads() -> None:
    """Make ``DurableOrchestrationContext.histories`` note a read by code outside the SDK's
    core (orchestrator code, adapters such as the OpenAI Agents integration) on the reading
    thread, for ``history_read``. Idempotent (``install`` calls it); the SDK's own reads
    (building the context, starting the replay) are not counted. Replaces the class
    attribute only: the installed package is not modified."""
    global _watching
    module: Any = importlib.import_module(
        "azure.durable_functions.models.DurableOrchestrationContext"
    )
    context = module.DurableOrchestrationContext
    original = context.__dict__["histories"]
    if not getattr(original.fget, "watched", False):

        def histories(self: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")  # noqa: SLF001
            if not caller.startswith(_SDK_CORE):
                _reads.seen = True
            return original.fget(self)

        histories.watched = True  # type: ignore[attr-defined]
        context.histories = property(histories, doc=original.__doc__)
    _watching = True


def watching_history_reads() -> bool:
    """True once ``watch_history_reads`` ran: ``history_read`` can be trusted."""
    return _watching


def forget_history_reads() -> None:
    """Start watching for a read on this thread (before an episode calls the SDK)."""
    _reads.seen = False


def history_read() -> bool:
    """True if code outside the SDK read ``context.histories`` on this thread since
    ``forget_history_reads``."""
    return bool(getattr(_reads, "seen", False))


# --- the history cache -------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    key: tuple[str | None, str]
    events: list[Event]
    session: Any = None  # the instance's live SDK session (sessions.Session), if any
    text: HistoryText | None = None  # the SDK's JSON of ``events``, when kept


class HistoryCache:
    """Stored histories of hot instances, bounded in total events (LRU).

    ``get`` answers only when ``key`` - what the freshly read status row says, the
    execution id and last-update time - equals the key the entry was stored under, so an
    instance changed by anyone else (another host, a restart, a purge) is read again.
    """

    def __init__(self, max_events: int = 20_000):
        self.max_events = max(0, max_events)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        return self._size

    def get(self, instance_id: str, key: tuple[str | None, str]) -> list[Event] | None:
        entry = self._entries.get(instance_id)
        if entry is None or entry.key != key:
            self.misses += 1
            if entry is not None:
                self.evict(instance_id)
            return None
        self._entries.move_to_end(instance_id)
        self.hits += 1
        return entry.events

    def session(self, instance_id: str) -> Any:
        """The session stored with the instance's entry (ask right after a ``get`` hit)."""
        entry = self._entries.get(instance_id)
        return entry.session if entry is not None else None

    def text(self, instance_id: str) -> HistoryText | None:
        """The history text stored with the instance's entry (ask right after a ``get`` hit)."""
        entry = self._entries.get(instance_id)
        return entry.text if entry is not None else None

    def put(
        self,
        instance_id: str,
        key: tuple[str | None, str],
        events: list[Event],
        session: Any = None,
        text: HistoryText | None = None,
    ) -> None:
        self.evict(instance_id)
        if len(events) > self.max_events // 4 and self._size + len(events) > self.max_events:
            # One huge history must not flush every other instance; it stays while it fits
            # beside them (without its entry every episode of a long chain would read and
            # replay the whole history again: a step's cost grew with its length).
            return
        self._entries[instance_id] = _Entry(key, events, session, text)
        self._size += len(events)
        while self._size > self.max_events and self._entries:
            _, old = self._entries.popitem(last=False)
            self._size -= len(old.events)

    def evict(self, instance_id: str) -> None:
        entry = self._entries.pop(instance_id, None)
        if entry is not None:
            self._size -= len(entry.events)
