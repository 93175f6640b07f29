"""A live orchestration between episodes: a step without replaying the steps before it.

Without a session every episode rebuilds the orchestration from scratch: the SDK runs the
generator over the whole history, and ``shim.Shim`` walks the SDK's whole action list
against it. A ``Session`` keeps the result of both between episodes - the SDK's
``Orchestrator``, its ``TaskOrchestrationExecutor`` and ``DurableOrchestrationContext``, the
generator suspended at its last ``yield``, and the ``Shim`` with its cursor - and feeds the
next episode only the events added to the history since (``advance``): the SDK processes
them through the executor's own ``process_event``, the walk takes them through
``Shim.resume``, and only the actions the walk has not started are serialised
(``get_orchestrator_state_str`` runs over that tail of the context's action list, so an action
is serialised as it is when it starts, as a replay would) and walked. For deterministic
orchestrator code (the Durable rule) the outcome is the one a full replay computes: the
objects are the ones the replay would rebuild, fed the same events in the same order, so
output, custom status, failures, ``new_uuid``, ``current_utc_datetime``, the #507 buffered
events, the ids the walk numbers and the events it writes carry over unchanged. What does
not happen is the replay itself, so code guarded by ``context.is_replaying`` behaves as
usual and unguarded code is not re-run for past steps.

When a session cannot continue, the episode is a full replay (``rebuild``) whose objects
become the session; the walk then checks every recorded action against the history, so a
session rebuilt after an eviction, a restart or a code change fails the instance with the
named mismatch (``shim.NonDeterminismError``) instead of going on from a wrong state. It
cannot continue when:

* it has not seen this history: another execution, or a history that is not the one it saw
  grown by appending (a rewind, a restart, an episode that ran without it);
* it ended: the SDK said done or raised (a finished generator is never resumed);
* its code read ``context.histories`` (``reads_history``, seen by ``replay.watch_history_reads``;
  ``orchestration.py`` then decides the episode by a plain replay of the whole stored
  history, and every later one too): a step continued by a session saw the history only up
  to its own episode, a replay shows every step the whole of it;
* the orchestrator is not a generator function (``replays_only``). A plain function that
  *returns* a generator built by other code - an adapter such as the SDK's OpenAI Agents
  integration (``durable_openai_agent_orchestrator``), whose generator ends after yielding
  the task it waits for because it expects to be called again from the start, with the
  result then found in the history - may rely on being re-run every episode;
* the code changed: another function object for the orchestrator, or its source file
  changed on disk (a deployment next to a running host; the process still runs what it
  imported, so the replay runs that code, but nothing continues across the change). The
  file's stat is cached for ``STAMP_SECONDS`` (1 s), not taken at every episode (a system
  call, during which the thread gives up the GIL and then waits for it), so a change on
  disk ends the sessions that meet it within a second, not at their very next episode;
* an action the SDK already listed changed afterwards (a timer cancelled later): the walk
  cannot follow a change behind its cursor, so that episode walks the whole list again.

Scheduled full replays (``verify_every``, ``DURABLE_HOST_SESSION_VERIFY``): some episodes
that could continue are rebuilt instead - a full replay, the episode a session-less host
runs - so the walk checks every recorded action against the history there too, and code
that decides differently when re-run (a clock, a random number, I/O) fails with the named
mismatch, exactly as a full replay fails it. By default (``VERIFY_DOUBLING``) an episode is
replayed in full once the history has doubled since the last full replay: the checks of an
instance cost about two replays of its final history in all - a constant cost per step,
where replaying every episode costs one replay per step - and a young instance, whose
history doubles within a step or two, is checked at once. ``N`` replays every Nth
episode in full, ``0`` none (the extension's extended sessions: such code is caught only
when its session is rebuilt for another reason).

Equivalence is pinned by tests/unit/durable_host/test_replay_equivalence.py (every scenario,
sessions against plain and fast replays, byte for byte) and test_incremental_replay.py
(recorded golden histories episode by episode, a changed orchestrator caught on rebuild).
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import time
from collections.abc import Callable
from typing import Any

from azure.durable_functions.models.actions.CompoundAction import CompoundAction
from azure.durable_functions.models.actions.CreateTimerAction import CreateTimerAction
from azure.durable_functions.models.DurableOrchestrationContext import (
    DurableOrchestrationContext,
)
from azure.durable_functions.models.history.HistoryEvent import HistoryEvent
from azure.durable_functions.models.ReplaySchema import ReplaySchema
from azure.durable_functions.orchestrator import Orchestrator

from durable_host.core import replay
from durable_host.core.history import Event, EventType
from durable_host.core.shim import Shim

STAMP_SECONDS = 1.0  # how old a source file's cached stat may be (module doc)
_stamps: dict[str, tuple[float, int, int]] = {}  # file -> (when statted, mtime_ns, size)


def code_stamp(fn: Callable[..., Any], now: float | None = None) -> tuple[int, int, int]:
    """What identifies the orchestrator's code: the function object and its source file's
    modification time and size (0, 0 when it has none), the file statted at most once per
    ``STAMP_SECONDS`` (``now``: ``time.monotonic()``)."""
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if path is None:
        return id(fn), 0, 0
    now = time.monotonic() if now is None else now
    seen = _stamps.get(path)
    if seen is None or now - seen[0] >= STAMP_SECONDS:
        try:
            stat = os.stat(path)
            seen = (now, stat.st_mtime_ns, stat.st_size)
        except OSError:
            seen = (now, 0, 0)
        _stamps[path] = seen
    return id(fn), seen[1], seen[2]


def new_orchestrator(fn: Callable[..., Any]) -> Orchestrator:
    """What ``Orchestrator(fn)`` builds, without its cost: the SDK's executor defines a new
    namedtuple class in every ``__init__`` (a class compiled from source text) for two
    lookup tables it only reads. They are
    copied from an executor built once; ``initialize`` is the SDK's own reset of the
    per-run state. tests/unit/durable_host/test_incremental_replay.py pins that the copy
    has exactly the attributes a constructed one has."""
    orchestrator = copy.copy(_PRISTINE)
    orchestrator.fn = fn
    executor = copy.copy(_PRISTINE.task_orchestration_executor)
    executor.initialize()
    orchestrator.task_orchestration_executor = executor
    return orchestrator


_PRISTINE = Orchestrator(lambda context: None)  # never run: copied by new_orchestrator


VERIFY_DOUBLING = -1  # ``verify_every``: a full replay whenever the history doubled (module doc)


class Session:
    """One instance's live orchestration (see module doc). Not thread-safe: one episode at a
    time uses it, as the engine runs one episode at a time per instance."""

    def __init__(self, verify_every: int = VERIFY_DOUBLING) -> None:
        # Which episodes replay in full although they could continue (module doc).
        self.verify_every = verify_every
        self.continued = 0  # episodes served without a replay (for metrics and tests)
        self.checks = 0  # episodes replayed in full by that schedule
        self.replays_only = False  # the orchestrator may rely on re-running (module doc)
        self.reads_history = False  # its code reads context.histories (orchestration.py)
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next episode replays in full."""
        self._key: str | None = None
        self._fn: Callable[..., Any] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._orchestrator: Orchestrator | None = None
        self._context: DurableOrchestrationContext | None = None
        self._ended = False
        self.shim: Shim | None = None
        self.covers = 0  # history events the SDK and the walk have been given
        self._last: Event | None = None  # the last of them (the same object, not a copy)
        self._decoded = 0  # SDK actions whose timers are tracked
        self._timers: list[CreateTimerAction] = []  # decoded while not cancelled
        self.seen: Any = None  # orchestration's duplicate index of the history (opaque here)
        self.seen_covers = 0
        self._since_rebuild = 0  # episodes continued since the last full replay
        self._rebuilt_at = 0  # history events the last full replay covered

    # --- continuing ---------------------------------------------------------------------

    def can_continue(self, handle: Callable[[str], str], key: str, history: list[Event]) -> bool:
        """True if ``history`` is the one this session saw, grown by appending, in execution
        ``key``, and nothing in the module doc's list forbids continuing."""
        fn = getattr(handle, "orchestrator_function", None)
        return (
            self._orchestrator is not None
            and self.shim is not None
            and not self._ended
            and not self.replays_only
            and self._key == key
            and fn is self._fn
            and 0 < self.covers <= len(history)
            and history[self.covers - 1] is self._last
            and fn is not None
            and code_stamp(fn) == self._stamp
        )

    def continues(self, handle: Callable[[str], str], key: str, history: list[Event]) -> bool:
        """True if the next episode over ``history`` is most likely continued: it can
        continue and no full replay is due (its work is the new events', not the history's)."""
        return self.can_continue(handle, key, history) and not self.check_due(history)

    def check_due(self, history: list[Event]) -> bool:
        """True if this episode, which could continue, replays in full (module doc)."""
        if self.verify_every == VERIFY_DOUBLING:
            return len(history) >= 2 * self._rebuilt_at
        return 0 < self.verify_every <= self._since_rebuild + 1

    def advance(self, events: list[Event], first: int) -> str:
        """Feed the SDK ``events`` (every event added to the history since it last looked;
        it takes those it reads) and return its answer as ``get_orchestrator_state_str``
        gives it, but listing only the actions from number ``first`` on (the walk's
        ``released``: those it has not started). Raises as the SDK's handle raises (the
        error carries that shorter state too)."""
        assert self._orchestrator is not None and self._context is not None
        executor = self._orchestrator.task_orchestration_executor
        context = self._context
        read = replay.sdk_history(events)
        # The replay boundary is the last OrchestratorStarted: events before it count as
        # replayed (``is_replaying``), as a full replay of this history would count them.
        boundary = max(
            (i for i, e in enumerate(read) if e["EventType"] == EventType.ORCHESTRATOR_STARTED),
            default=0,
        )
        self.covers += len(events)
        self._last = events[-1] if events else self._last
        self.continued += 1
        self._since_rebuild += 1
        try:
            for index, event in enumerate(read):
                parsed = HistoryEvent(**event)
                context._histories.append(parsed)
                executor._is_processing_new_events = index >= boundary
                executor.process_event(parsed)
                if executor.has_execution_completed:
                    break
            return self._answer(first)
        finally:
            self._ended = executor.has_execution_completed

    def _answer(self, first: int = 0) -> str:
        """The executor's state string, listing the actions from number ``first`` on.

        Actions not started yet are serialised again every episode, not kept from the one
        that listed them: code may change an object it passed (an input, ``RetryOptions``)
        before the action is started, and a replay would serialise it as it is now."""
        assert self._orchestrator is not None and self._context is not None
        executor = self._orchestrator.task_orchestration_executor
        context = self._context
        actions = context._action_payload_v2
        self._timers.extend(_timers(actions[self._decoded :]))
        self._decoded = len(actions)
        if not first or context._replay_schema is ReplaySchema.V1:
            return executor.get_orchestrator_state_str()
        context._action_payload_v2 = actions[first:]
        try:
            return executor.get_orchestrator_state_str()
        finally:
            context._action_payload_v2 = actions

    def timer_cancelled(self) -> bool:
        """True if a timer action decoded earlier was cancelled since (module doc)."""
        return any(timer.is_cancelled for timer in self._timers)

    def full_answer(self) -> tuple[str, bool]:
        """The SDK's whole answer as a replay gives it (every action), or the text of the
        error it raises instead (then True)."""
        try:
            return self._answer(), False
        except Exception as exc:  # noqa: BLE001 - the SDK reports failures by raising
            return str(exc), True

    # --- rebuilding ---------------------------------------------------------------------

    def rebuild(self, handle: Callable[[str], str], key: str, request: dict[str, Any]) -> str:
        """A full replay of ``request`` (its ``history``: the events the SDK reads) whose
        objects this session keeps; the SDK's answer (every action). Raises as the handle."""
        self.reset()
        fn = getattr(handle, "orchestrator_function", None)
        if fn is None:
            self._ended = True  # not an SDK handle: nothing to keep
            return handle(json.dumps(request))
        self.replays_only = not inspect.isgeneratorfunction(fn)
        # What Orchestrator.create(fn)'s handle does, keeping the objects it builds.
        context = DurableOrchestrationContext.from_json(json.dumps(request))
        context._input_expected_type = getattr(handle, "_df_input_type", None)
        orchestrator = new_orchestrator(fn)
        self._key, self._fn, self._stamp = key, fn, code_stamp(fn)
        self._orchestrator, self._context = orchestrator, context
        try:
            return orchestrator.handle(context)
        finally:
            executor = orchestrator.task_orchestration_executor
            self._ended = executor.has_execution_completed
            actions = context._action_payload_v2
            self._decoded = len(actions)
            self._timers = _timers(actions)

    def keep(self, shim: Shim, history: list[Event]) -> None:
        """After a full walk: keep ``shim``, which walked all of ``history``."""
        self.shim = shim
        self.covers = len(history)
        self._last = history[-1] if history else None
        if not self._since_rebuild:  # after a full replay (not a full walk of a session)
            self._rebuilt_at = max(1, len(history))
        if self._context is not None:
            self._timers = _timers(self._context._action_payload_v2)
            self._decoded = len(self._context._action_payload_v2)


def _timers(actions: list[Any]) -> list[CreateTimerAction]:
    """The timer actions in ``actions`` (compound ones opened) not cancelled yet."""
    found: list[CreateTimerAction] = []
    stack = list(actions)
    while stack:
        action = stack.pop()
        if isinstance(action, CreateTimerAction):
            if not action.is_cancelled:
                found.append(action)
        elif isinstance(action, CompoundAction):
            stack.extend(action.compound_tasks)
    return found
