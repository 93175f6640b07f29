"""One orchestration episode: history and new messages in, decisions out. Pure.

An *episode* appends ``OrchestratorStarted(now)`` and the newly arrived messages to the
current execution's history, replays it through the SDK's own orchestrator handle, and
turns the returned action list into new history events and outgoing messages exactly
as the Durable extension's out-of-process shim does (protocol reference §2.5):

* Actions are walked in order and numbered like DTFx's ``idCounter`` (activities,
  sub-orchestrations, timers, entity calls and signals, HTTP calls take one id each;
  waits and continue-as-new take none; a retry takes one id per attempt plus one timer
  id after every failure, the last one included).
* **Strict scheduling**: action k+1 is released only once action k has resolved under
  .NET ``WhenAll``/``WhenAny`` rules, and the instance completes (or fails) only once
  every listed action has resolved - so an app that works here works on Azure.
* Retries are the host's job (the SDK only mirrors the ids): after a failed attempt the
  host writes a retry timer, and when it fires the next attempt or the final failure.
* Replayed actions must match the scheduling events already in history by id, type
  and name, else the instance fails with a message naming the mismatch (the SDK does
  not check this itself).

The walk over the actions is ``shim.py``; this module sorts the incoming messages (held
while suspended, dropped when late or duplicate), runs the SDK, and turns the outcome into
the episode: completion, failure, continue-as-new, termination, a quarantine (``poison``)
or a rewind (``rewind.py``).

Nothing here does IO or reads a clock: ``now`` and the new execution id are inputs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_host.core import history as h
from durable_host.core import replay, rewind, wire
from durable_host.core.history import Event, EventType
from durable_host.core.records import (
    HOLDING,
    TERMINAL,
    Episode,
    MessageKind,
    Outgoing,
    OutgoingKind,
    RuntimeStatus,
)
from durable_host.core.shim import InstanceView, Node, NonDeterminismError, Shim
from durable_host.core.wire import ActionType

if TYPE_CHECKING:
    from durable_host.core.sessions import Session

__all__ = ["Episode", "InstanceView", "NonDeterminismError", "Outgoing", "run_episode"]

OrchestratorHandle = Callable[[str], str]
CUSTOM_STATUS_LIMIT = 16 * 1024  # UTF-16 code units, as the extension counts them
_LIVE = (RuntimeStatus.RUNNING, RuntimeStatus.SUSPENDED)  # an execution is under way


def all_held(status: str | None, messages: list[dict[str, Any]]) -> bool:
    """True if an episode would only leave these messages waiting (nothing to decide)."""
    return status in HOLDING and all(m.get("kind") == MessageKind.EVENT for m in messages)


# --- the episode ------------------------------------------------------------------------


def run_episode(
    handle: OrchestratorHandle | None,
    view: InstanceView,
    messages: list[tuple[int, dict[str, Any]]],
    now: str,
    new_execution_id: str,
    *,
    compact: bool = False,
    poison: str | None = None,
    session: Session | None = None,
    default_version: str | None = None,
    history_text: replay.HistoryText | None = None,
) -> Episode:
    """Decide one episode. ``handle`` None means the orchestrator is not defined.

    ``default_version`` is the version a sub-orchestration started without one gets (host.json
    ``defaultVersion``). A version this host must not run is decided before the episode
    (``versioning.blocked``): rejected, the episode never runs; failed, it comes in as
    ``poison`` (the instance fails with that reason and its code does not run).

    ``compact`` hands the SDK only the events it reads (``replay.sdk_history``: the same
    decisions for less work); ``session`` continues the SDK's live orchestration from the
    last episode instead of replaying it (``sessions.py``; it falls back to a replay by
    itself). ``history_text``, with ``compact``, is the SDK's JSON of ``view.history`` when
    it covers all of it (``replay.HistoryText``): only the new events are encoded.
    ``poison`` quarantines the instance: its messages are taken as usual, then it
    fails with that reason and its code does not run.
    """
    episode = Episode()
    state = _MessageState(view, now, new_execution_id)
    if session is not None and session.seen is not None:
        if session.seen_covers == len(view.history):
            state.seed_seen(session.seen)  # kept with the session: no pass over the history
        session.seen = None  # kept again below, only if the episode leaves it exact
    for message_id, message in messages:
        state.accept(message_id, message)
    episode.consumed = sorted(state.consumed)
    if state.terminated is not None:
        return _terminate(episode, state, now)
    poison = poison or state.poison
    if state.rewind is not None and poison is None:
        _rewind(handle, episode, state, now)
        if session is not None:
            session.reset()  # the history was rewritten: only a full replay fits it
    if state.suspend_changed:
        episode.status = state.status
    if poison is not None and state.status in _LIVE:
        result = _quarantine(episode, state, poison, now)
    elif not state.new_events or state.status != RuntimeStatus.RUNNING:
        _copy_start(episode, state)
        episode.events = (
            [h.orchestrator_started(now), *state.new_events] if state.new_events else []
        )
        result = episode
    else:
        result = _invoke(
            handle, episode, state, now, compact, session, default_version, history_text
        )
    if session is not None and result.status not in (None, RuntimeStatus.RUNNING):
        session.reset()  # finished, failed or continued as new: nothing to continue
    elif session is not None and state.history_is_view() and not result.replace_history:
        seen = state.seen_index()
        for event in result.events:
            seen.add(event)
        session.seen, session.seen_covers = seen, len(view.history) + len(result.events)
    if state.rewritten:
        result.rewrite_history = True
        result.events = [*state.history, *result.events]
    return result


class _Seen:
    """The completions and scheduling ids a history holds, for O(1) duplicate checks."""

    def __init__(self, events: list[Event]):
        self.completed: set[tuple[int, Any]] = set()
        self.scheduled: set[Any] = set()
        for event in events:
            self.add(event)

    def add(self, event: Event) -> None:
        kind = event["EventType"]
        if kind in h.COMPLETION_TYPES:
            self.completed.add((kind, event["TaskScheduledId"]))
        elif kind == EventType.TIMER_FIRED:
            self.completed.add((kind, event["TimerId"]))
        elif kind in h.SCHEDULING_TYPES:
            self.scheduled.add(event["EventId"])

    def is_duplicate(self, event: Event) -> bool:
        """Exactly one completion per scheduled task: later copies (and strays) are dropped."""
        kind = event["EventType"]
        if kind in h.COMPLETION_TYPES:
            key = event["TaskScheduledId"]
        elif kind == EventType.TIMER_FIRED:
            key = event["TimerId"]
        else:
            return False
        return (kind, key) in self.completed or key not in self.scheduled


class _MessageState:
    """Sorts incoming messages: which become events, which are held or dropped."""

    def __init__(self, view: InstanceView, now: str, new_execution_id: str):
        self.view = view
        self.now = now
        self.status = view.status
        self.execution_id = view.execution_id
        self.history = list(view.history)
        self.new_events: list[Event] = []
        self.held: list[tuple[int, dict[str, Any]]] = []
        self.consumed: list[int] = []
        self.started: Event | None = None
        self.terminated: str | None = None
        self.suspend_changed = False
        self.new_execution_id = new_execution_id
        self.poison: str | None = None
        self.rewind: dict[str, Any] | None = None
        self.rewritten = False
        self._seen: _Seen | None = None

    def history_is_view(self) -> bool:
        """True while ``history`` is still the stored one (no restart, no rewind)."""
        return (
            not self.rewritten
            and self.execution_id == self.view.execution_id
            and len(self.history) == len(self.view.history)
        )

    def accept(self, message_id: int, message: dict[str, Any]) -> None:
        """Apply one message: consume it, drop it (also consumed) or hold it in the inbox."""
        kind = message.get("kind")
        if kind == MessageKind.EVENT and self._holds(message):
            self.held.append((message_id, message))
            return
        self.consumed.append(message_id)
        if self.terminated is not None:
            return
        if kind == MessageKind.START:
            self._start(message)
        elif kind == MessageKind.REWIND:
            self._rewind_request(message)
        elif kind == MessageKind.UNDECODABLE:
            self.poison = self.poison or (
                f"poison message quarantined: inbox message {message_id} could not be decoded"
                f" ({message.get('error')})"
            )
        elif self.status in TERMINAL or self.status is None:
            return  # late messages for a finished (or unknown) instance are dropped
        elif kind == MessageKind.TERMINATE:
            self.terminated = message.get("reason") or ""
        elif kind == MessageKind.SUSPEND and self.status == RuntimeStatus.RUNNING:
            self.status, self.suspend_changed = RuntimeStatus.SUSPENDED, True
            self.new_events.append(h.execution_suspended(self.now, message.get("reason")))
        elif kind == MessageKind.RESUME and self.status == RuntimeStatus.SUSPENDED:
            self.status, self.suspend_changed = RuntimeStatus.RUNNING, True
            self.new_events.append(h.execution_resumed(self.now, message.get("reason")))
            self._release_held()
        elif kind == MessageKind.EVENT:
            self._event(message)

    def _holds(self, message: dict[str, Any]) -> bool:
        """Events wait in the inbox while suspended or between executions."""
        return self.terminated is None and self.status in HOLDING

    def _release_held(self) -> None:
        held, self.held = self.held, []
        for message_id, message in held:
            self.consumed.append(message_id)
            self._event(message)

    def _start(self, message: dict[str, Any]) -> None:
        if self.status in _LIVE:
            return  # refused at the API; a stray duplicate start is dropped
        event = dict(message["event"])
        event["OrchestrationInstance"] = {
            "InstanceId": self.view.instance_id,
            "ExecutionId": self.new_execution_id,
        }
        self.started = event
        self.status = RuntimeStatus.RUNNING
        self.execution_id = self.new_execution_id
        self.history = []
        self.rewind, self.rewritten, self._seen = None, False, None
        self.new_events = [event, *message.get("carried", [])]
        self._release_held()

    def _rewind_request(self, message: dict[str, Any]) -> None:
        # The API leaves a rewound instance Pending; its history still ends in the failure.
        pending_rewind = self.status == RuntimeStatus.PENDING and _ended_failed(self.history)
        if self.status == RuntimeStatus.FAILED or pending_rewind:
            # Running from here on, so later messages of this batch are taken; the history
            # itself is rewritten once all messages are in (it needs the orchestrator).
            self.rewind, self.status = message, RuntimeStatus.RUNNING
            reason = message.get("reason") or ""
            self.new_events.append(h.generic_event(self.now, f"Rewind: {reason}"))
        elif message.get("start") is not None and self.status not in _LIVE:
            # A parent is rewound and this child did not fail (e.g. it was terminated):
            # the child runs again from its start instead.
            self._start({"kind": MessageKind.START, "event": message["start"]})

    def seed_seen(self, seen: _Seen) -> None:
        """Use ``seen``, the index of exactly ``view.history``, instead of building one."""
        self._seen = seen

    def seen_index(self) -> _Seen:
        """The index of the history and the events accepted so far (built if need be)."""
        if self._seen is None:
            self._seen = _Seen(self.history + self.new_events)
        return self._seen

    def forget_seen(self) -> None:
        """The history was replaced: duplicate checks must look at the new one."""
        self._seen = None

    def _event(self, message: dict[str, Any]) -> None:
        target_execution = message.get("execution_id")
        if target_execution and target_execution != self.execution_id:
            return  # a completion for an older execution
        event = message["event"]
        seen = self.seen_index()
        if not seen.is_duplicate(event):
            self.new_events.append(event)
            seen.add(event)


def _ended_failed(history: list[Event]) -> bool:
    return any(
        e["EventType"] == EventType.EXECUTION_COMPLETED
        and e.get("OrchestrationStatus") == RuntimeStatus.FAILED
        for e in history
    )


def _copy_start(episode: Episode, state: _MessageState) -> None:
    if state.started is not None:
        episode.replace_history = True
        episode.execution_id = state.execution_id
        episode.status = state.status
        episode.name = state.started.get("Name")
        episode.input_json = state.started.get("Input")
        episode.version = state.started.get("Version")
        episode.parent = state.started.get("ParentInstance")


def _terminate(episode: Episode, state: _MessageState, now: str) -> Episode:
    _copy_start(episode, state)
    reason = state.terminated or ""
    episode.events = [
        h.orchestrator_started(now),
        *state.new_events,
        h.execution_terminated(now, reason),
        h.orchestrator_completed(now),
    ]
    episode.status = RuntimeStatus.TERMINATED
    episode.output_json = reason
    started = _execution_started(state.history + state.new_events)
    name = started.get("Name", "") if started else ""
    _notify_parent(
        episode,
        started,
        failed=True,
        text=f"Orchestrator function '{name}' was terminated: {reason}",
    )
    return episode


def _execution_started(events: list[Event]) -> Event | None:
    return next((e for e in events if e["EventType"] == EventType.EXECUTION_STARTED), None)


def _quarantine(episode: Episode, state: _MessageState, poison: str, now: str) -> Episode:
    _copy_start(episode, state)
    started = _execution_started(state.history + state.new_events)
    assert started is not None, "a running instance always has ExecutionStarted"
    prefix = [h.orchestrator_started(now), *state.new_events]
    return _finish_failed(episode, prefix, started, poison, now)


def unreadable_history_episode(name: str, consumed: list[int], reason: str, now: str) -> Episode:
    """Fail an instance whose stored history cannot be decoded (it cannot be replayed).

    Its parent, if any, is not told: the parent's address is in the unreadable history.
    """
    message = f"Orchestrator function '{name}' failed: quarantined: {reason}"
    output = json.dumps(message)
    events = [
        h.orchestrator_started(now),
        h.execution_completed(now, RuntimeStatus.FAILED, output),
        h.orchestrator_completed(now),
    ]
    return Episode(
        consumed=sorted(consumed), events=events, status=RuntimeStatus.FAILED, output_json=output
    )


def missing_orchestrator_message(name: str) -> str:
    """The extension's text for an orchestrator it does not know (or that is disabled)."""
    return f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function."


def _invoke(
    handle: OrchestratorHandle | None,
    episode: Episode,
    state: _MessageState,
    now: str,
    compact: bool,
    session: Session | None,
    default_version: str | None = None,
    history_text: replay.HistoryText | None = None,
) -> Episode:
    _copy_start(episode, state)
    # One OrchestratorStarted object, in the events replayed and in the episode's events: a
    # session recognises the history it saw by the identity of its last event.
    prefix = [h.orchestrator_started(now), *state.new_events]
    started = _execution_started(state.history) or _execution_started(prefix)
    assert started is not None, "a running instance always has ExecutionStarted"
    name = started["Name"]
    if handle is None:
        return _finish_failed(episode, prefix, started, missing_orchestrator_message(name), now)
    view = InstanceView(
        state.view.instance_id, RuntimeStatus.RUNNING, state.execution_id, state.history, name
    )
    step = _Step(handle, view, prefix, started, now, default_version)
    try:
        decided, shim, resolved = _decide_episode(step, state, compact, session, history_text)
    except NonDeterminismError as exc:
        if session is not None:
            session.reset()
        return _finish_failed(episode, prefix, started, str(exc), now)
    if shim is None:
        assert decided.raw_failure is not None
        return _finish_failed(episode, prefix, started, decided.raw_failure, now)
    if decided.has_custom_status:
        text = wire.encode_json_text(decided.custom_status)
        if len(text.encode("utf-16-le")) // 2 > CUSTOM_STATUS_LIMIT:
            message = f"The custom status exceeds the limit of {CUSTOM_STATUS_LIMIT} characters."
            return _finish_failed(episode, prefix, started, message, now)
        episode.custom_status_json, episode.custom_status_changed = text, True
    episode.events = [*prefix, *shim.new_events]
    episode.outbox = [*episode.outbox, *shim.outbox]
    episode.status = RuntimeStatus.RUNNING
    if resolved and decided.error is not None:
        return _finish_failed(episode, episode.events, started, decided.error, now)
    if resolved and decided.is_done:
        _complete(episode, decided, started, shim, now)
    episode.events.append(h.orchestrator_completed(now))
    return episode


Decided = tuple[wire.OrchestratorState, Shim | None, bool]


@dataclass(frozen=True, slots=True)
class _Step:
    """What deciding one episode takes, whichever way it is decided: the stored history is
    ``view.history``, ``prefix`` the episode's OrchestratorStarted and new events."""

    handle: OrchestratorHandle
    view: InstanceView
    prefix: list[Event]
    started: Event
    now: str
    default_version: str | None

    @property
    def history(self) -> list[Event]:
        return self.view.history

    def events(self) -> list[Event]:
        """The whole history the episode decides on."""
        return [*self.view.history, *self.prefix]


def _decide_episode(
    step: _Step,
    state: _MessageState,
    compact: bool,
    session: Session | None,
    history_text: replay.HistoryText | None,
) -> Decided:
    """The SDK's decisions and the walk, the cheapest way that gives what a plain replay of
    the whole stored history gives: a plain replay when the code reads ``context.histories``
    (``replay.watch_history_reads``), which a session or a compact history would show it
    differently. Raises ``NonDeterminismError`` as the walk does."""
    # Plain: asked for; the code is known to read the history; or reads could not be seen.
    plain = (
        not compact
        or (session is not None and session.reads_history)
        or not replay.watching_history_reads()
    )
    if plain:
        return _replayed(step)
    replay.forget_history_reads()
    try:
        if session is not None:
            decided = _live(step, session)
        else:
            decided = _replayed(step, True, history_text if state.history_is_view() else None)
    except NonDeterminismError:
        if not replay.history_read():
            raise
    else:
        if not replay.history_read():
            return decided
    if session is not None:
        session.reset()
        session.reads_history = True  # kept across resets: replays in full from now on
    return _replayed(step)


def _replayed(
    step: _Step, compact: bool = False, history_text: replay.HistoryText | None = None
) -> Decided:
    """A full replay: the SDK over the whole history (``compact``: only the events it reads),
    the walk over every action it lists. Without ``compact`` it is a plain replay, the whole
    stored history as the extension hands it to the SDK. The walk is None when the SDK failed
    without a state (``raw_failure``)."""
    events = step.events()
    text = None
    if history_text is not None and history_text.covers == len(step.history):
        text = history_text.text(step.prefix)
    decided = _decide(step.handle, step.view.instance_id, events, step.started, compact, text)
    return _walk_all(decided, step.view, events, step.now, step.default_version)


def _live(step: _Step, session: Session) -> Decided:
    """The episode through ``session`` (``sessions.py``): continued from the last episode
    when it can be - only the events added since are fed, only the actions added since
    are decoded and walked - else a full replay whose objects the session keeps."""
    history = step.history
    if not session.can_continue(step.handle, step.view.execution_id or "", history):
        return _rebuild(step, session)
    if session.check_due(history):
        session.checks += 1  # a full replay on schedule: it checks determinism (sessions.py)
        return _rebuild(step, session)
    events = [*history[session.covers :], *step.prefix]
    shim = session.shim
    assert shim is not None
    if not shim.resume(events, step.now):
        return _rebuild(step, session)
    first = shim.released
    decided = _answer(lambda: session.advance(events, first))
    if decided.raw_failure is not None:
        return decided, None, False
    if session.timer_cancelled():
        # An action behind the walk's cursor changed: walk the whole list again.
        full, raised = session.full_answer()
        decided = (
            wire.decode_orchestrator_exception(full)
            if raised
            else wire.decode_orchestrator_state(full)
        )
        return _walk_all(decided, step.view, step.events(), step.now, step.default_version, session)
    resolved = shim.walk(decided.actions, first)
    shim.check_replayed()
    return decided, shim, resolved


def _rebuild(step: _Step, session: Session) -> Decided:
    events = step.events()
    request = _request(step.view.instance_id, events, step.started, True)
    key = step.view.execution_id or ""
    decided = _answer(lambda: session.rebuild(step.handle, key, request))
    return _walk_all(decided, step.view, events, step.now, step.default_version, session)


def _walk_all(
    decided: wire.OrchestratorState,
    view: InstanceView,
    events: list[Event],
    now: str,
    default_version: str | None,
    session: Session | None = None,
) -> Decided:
    """Walk every action ``decided`` lists with a fresh shim over ``events`` (the whole
    history), which ``session`` then keeps; no walk when the SDK failed without a state."""
    if decided.raw_failure is not None:
        return decided, None, False
    shim = Shim(view, events, now, view.execution_id or "", default_version)
    resolved = shim.walk(decided.actions)
    shim.check_replayed()
    if session is not None:
        session.keep(shim, events)
    return decided, shim, resolved


def _answer(call: Callable[[], str]) -> wire.OrchestratorState:
    """The SDK's answer from ``call``, decoded; its failure when it raises."""
    try:
        return wire.decode_orchestrator_state(call())
    except Exception as exc:  # noqa: BLE001 - user-code failure is data
        return wire.decode_orchestrator_exception(str(exc))


def _request(
    instance_id: str, events: list[Event], started: Event, compact: bool
) -> dict[str, Any]:
    return wire.orchestration_request(
        instance_id,
        replay.sdk_history(events) if compact else events,
        started.get("Input"),
        _parent_id(started),
    )


def _parent_id(started: Event) -> str | None:
    parent = started.get("ParentInstance") or {}
    return (parent.get("OrchestrationInstance") or {}).get("InstanceId")


def _decide(
    handle: OrchestratorHandle,
    instance_id: str,
    events: list[Event],
    started: Event,
    compact: bool,
    history_text: str | None = None,
) -> wire.OrchestratorState:
    """Run the SDK over ``events``: its decisions, or its failure. ``history_text``: the
    JSON of the compact ``events``' items, when already at hand."""
    if history_text is not None:
        raw = wire.encode_orchestration_request_text(
            instance_id, history_text, started.get("Input"), _parent_id(started)
        )
        return _answer(lambda: handle(raw))
    request = _request(instance_id, events, started, compact)
    return _answer(lambda: handle(json.dumps(request)))


def _complete(
    episode: Episode, decided: wire.OrchestratorState, started: Event, shim: Shim, now: str
) -> None:
    restart = next(
        (a for a in decided.actions if a["actionType"] == ActionType.CONTINUE_AS_NEW), None
    )
    if restart is not None:
        episode.status = RuntimeStatus.CONTINUED_AS_NEW
        episode.events.append(h.execution_completed(now, RuntimeStatus.CONTINUED_AS_NEW, None))
        fresh = dict(started, Input=json.dumps(restart.get("input")), Timestamp=now)
        target = shim.view.instance_id
        # Carried events ride inside the start message, so they stay ahead of any event that
        # arrived while this episode ran (those are held in the inbox, and released after).
        carried = shim.unconsumed_events()
        payload = {"kind": MessageKind.START, "event": fresh, "carried": carried}
        episode.outbox.append(Outgoing(OutgoingKind.MESSAGE, target, payload))
        return
    result = wire.encode_json_text(decided.output) if decided.has_output else None
    episode.status = RuntimeStatus.COMPLETED
    episode.output_json = result
    episode.events.append(h.execution_completed(now, RuntimeStatus.COMPLETED, result))
    _notify_parent(episode, started, failed=False, text=result)


def _finish_failed(
    episode: Episode, prefix: list[Event], started: Event, error: str, now: str
) -> Episode:
    message = f"Orchestrator function '{started['Name']}' failed: {error}"
    output = json.dumps(message)
    episode.events = [*prefix, h.execution_completed(now, RuntimeStatus.FAILED, output)]
    episode.events.append(h.orchestrator_completed(now))
    episode.status = RuntimeStatus.FAILED
    episode.output_json = output
    _notify_parent(episode, started, failed=True, text=message)
    return episode


def _notify_parent(
    episode: Episode, started: Event | None, *, failed: bool, text: str | None
) -> None:
    parent = (started or {}).get("ParentInstance")
    if not parent:
        return
    instance = parent["OrchestrationInstance"]
    task_id = parent["TaskScheduleId"]
    now = episode.events[-1]["Timestamp"] if episode.events else ""
    if failed:
        event = h.sub_orchestration_failed(
            task_id, now, text or "", f"Message: {text}, StackTrace: "
        )
    else:
        event = h.sub_orchestration_completed(task_id, now, text)
    execution_id = instance.get("ExecutionId")
    payload = {"kind": MessageKind.EVENT, "event": event, "execution_id": execution_id}
    episode.outbox.append(Outgoing(OutgoingKind.MESSAGE, instance["InstanceId"], payload))


# --- rewind (the plan and the rewrite are in rewind.py) ------------------------------------


def _rewind(
    handle: OrchestratorHandle | None, episode: Episode, state: _MessageState, now: str
) -> None:
    view, execution_id = state.view, state.execution_id or ""
    nodes = _replayed_nodes(handle, view, state.history, execution_id)
    rerun, in_place = rewind.plan(state.history, nodes)
    reason = (state.rewind or {}).get("reason") or ""
    history, outbox = rewind.rewrite(state.history, rerun, in_place, view, execution_id, reason)
    state.history, state.rewritten = history, True
    state.forget_seen()
    episode.outbox.extend(outbox)
    episode.output_json = None


def _replayed_nodes(
    handle: OrchestratorHandle | None, view: InstanceView, history: list[Event], execution_id: str
) -> list[Node]:
    """The actions of the failed execution as the shim resolved them (which ids each took)."""
    started = _execution_started(history)
    if handle is None or started is None or not history:
        return []
    decided = _decide(handle, view.instance_id, history, started, compact=False)
    replayed = InstanceView(
        view.instance_id, RuntimeStatus.RUNNING, execution_id, history, view.name
    )
    shim = Shim(replayed, history, history[-1]["Timestamp"], execution_id)
    with contextlib.suppress(NonDeterminismError):  # changed code: failure events decide
        shim.walk(decided.actions)
    return shim.nodes
