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

Nothing here does IO or reads a clock: ``now`` and the new execution id are inputs.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from durable_host import history as h
from durable_host import wire
from durable_host.history import Event, EventType
from durable_host.wire import ActionType

OrchestratorHandle = Callable[[str], str]
CUSTOM_STATUS_LIMIT = 16 * 1024  # UTF-16 code units, as the extension counts them
_REQUEST_NAMESPACE = uuid.UUID("7b0c3c8e-9a55-4b55-9a39-3b1f0f7c1d11")


class NonDeterminismError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message produced by an episode, committed atomically with it.

    ``kind`` is ``"activity"`` (run ``payload`` as an activity work item) or
    ``"message"`` (deliver ``payload`` to ``target``'s inbox, not before ``visible_at``).
    """

    kind: str
    target: str
    payload: dict[str, Any]
    visible_at: str | None = None


@dataclass(slots=True)
class Episode:
    consumed: list[int] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    replace_history: bool = False  # a new execution starts (start or continue-as-new)
    execution_id: str | None = None
    status: str | None = None  # None: unchanged
    output_json: str | None = None
    custom_status_json: str | None = None
    custom_status_changed: bool = False
    name: str | None = None
    input_json: str | None = None
    version: str | None = None
    parent: dict[str, Any] | None = None
    outbox: list[Outgoing] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InstanceView:
    """What the engine knows about an instance before the episode."""

    instance_id: str
    status: str | None  # None: never started
    execution_id: str | None
    history: list[Event]
    name: str | None = None


TERMINAL = frozenset({"Completed", "Failed", "Terminated", "Canceled"})


# --- the .NET side of the shim, simulated ----------------------------------------------


@dataclass(eq=False)
class _Node:
    action: dict[str, Any]
    children: list[_Node] = field(default_factory=list)
    done: bool = False
    attempt: int = 1


class _Shim:
    """Replays history against the action list the way DTFx + the shim would."""

    def __init__(self, view: InstanceView, events: list[Event], now: str, execution_id: str):
        self.view = view
        self.events = events
        self.pos = 0
        self.counter = 0
        self.clock = now
        self.now = now
        self.execution_id = execution_id
        self.pending: dict[int, tuple[str, _Node]] = {}
        self.waiters: dict[str, deque[_Node]] = defaultdict(deque)
        self.buffered: dict[str, deque[Event]] = defaultdict(deque)
        self.scheduled = {
            e["EventId"]: e for e in events if e["EventType"] in h.SCHEDULING_TYPES
        }
        self.new_events: list[Event] = []
        self.outbox: list[Outgoing] = []

    # -- walking actions --
    def walk(self, actions: list[dict[str, Any]]) -> bool:
        """Release actions in order; True if every action resolved."""
        for action in actions:
            node = self._start(action)
            if not self._await(node):
                return False
        return True

    def _await(self, node: _Node) -> bool:
        while not _resolved(node):
            if self.pos >= len(self.events):
                return False
            self._apply(self.events[self.pos])
            self.pos += 1
        return True

    def _start(self, action: dict[str, Any]) -> _Node:
        node = _Node(action)
        kind = ActionType(action["actionType"])
        if kind in (ActionType.WHEN_ALL, ActionType.WHEN_ANY):
            node.children = [self._start(child) for child in action.get("compoundActions", [])]
        elif kind in (ActionType.CALL_ACTIVITY, ActionType.CALL_ACTIVITY_WITH_RETRY):
            self._schedule_activity(node, self._next_id())
        elif kind in (ActionType.CALL_SUB_ORCHESTRATOR, ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            self._schedule_child(node, self._next_id())
        elif kind == ActionType.CREATE_TIMER:
            self._schedule_timer(node, self._next_id())
        elif kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            self._wait(node, action["externalEventName"])
        elif kind in (ActionType.CALL_ENTITY, ActionType.SIGNAL_ENTITY):
            self._send_entity(node, self._next_id(), signal=kind == ActionType.SIGNAL_ENTITY)
        elif kind == ActionType.CALL_HTTP:
            self._schedule_http(node, self._next_id())
        else:  # continue-as-new (and anything fire-and-forget) resolves at once
            node.done = True
        return node

    def _next_id(self) -> int:
        value = self.counter
        self.counter += 1
        return value

    def _recorded(self, event_id: int, kind: EventType, name: str | None) -> bool:
        """True if history already holds this scheduling event; raise on a mismatch."""
        event = self.scheduled.get(event_id)
        if event is None:
            return False
        recorded_name = event.get("Name")
        if event["EventType"] != kind or (
            name is not None and str(recorded_name).lower() != name.lower()
        ):
            raise NonDeterminismError(
                f"Non-Deterministic workflow detected: history has {EventType(event['EventType']).name}"
                f" '{recorded_name}' with sequence id {event_id}, but the replay scheduled"
                f" {kind.name} '{name}'. Was the orchestrator code changed while this instance"
                " was running?"
            )
        return True

    def _schedule_activity(self, node: _Node, event_id: int) -> None:
        name, input_json = node.action["functionName"], node.action.get("input")
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.TASK_SCHEDULED, name):
            return
        self.new_events.append(h.task_scheduled(event_id, self.now, name, input_json))
        payload = {
            "instance_id": self.view.instance_id,
            "execution_id": self.execution_id,
            "task_id": event_id,
            "name": name,
            "input_json": input_json,
        }
        self.outbox.append(Outgoing("activity", self.view.instance_id, payload))

    def _schedule_http(self, node: _Node, event_id: int) -> None:
        request = node.action["httpRequest"]
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.TASK_SCHEDULED, "BuiltIn::HttpActivity"):
            return
        self.new_events.append(
            h.task_scheduled(event_id, self.now, "BuiltIn::HttpActivity", json.dumps(request))
        )
        payload = {
            "instance_id": self.view.instance_id,
            "execution_id": self.execution_id,
            "task_id": event_id,
            "name": "BuiltIn::HttpActivity",
            "input_json": json.dumps(request),
        }
        self.outbox.append(Outgoing("activity", self.view.instance_id, payload))

    def _schedule_child(self, node: _Node, event_id: int) -> None:
        action = node.action
        name = action["functionName"]
        child_id = action.get("instanceId") or f"{self.execution_id}:{event_id}"
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.SUB_ORCHESTRATION_CREATED, name):
            return
        input_json = json.dumps(action.get("input"))
        version = action.get("version")
        self.new_events.append(
            h.sub_orchestration_created(event_id, self.now, name, child_id, input_json, version)
        )
        start = h.execution_started(
            at=self.now,
            name=name,
            instance_id=child_id,
            execution_id="",
            input_json=input_json,
            version=version,
            parent={
                "Name": self.view.name,
                "Version": "",
                "TaskScheduleId": event_id,
                "OrchestrationInstance": {
                    "InstanceId": self.view.instance_id,
                    "ExecutionId": self.execution_id,
                },
            },
        )
        self.outbox.append(Outgoing("message", child_id, {"kind": "start", "event": start}))

    def _schedule_timer(self, node: _Node, event_id: int) -> None:
        fire_at = node.action["fireAt"]
        canceled = bool(node.action.get("isCanceled"))
        if not self._recorded(event_id, EventType.TIMER_CREATED, None):
            self.new_events.append(h.timer_created(event_id, self.now, fire_at))
            if not canceled:
                self._fire_later(event_id, fire_at)
        if canceled:
            node.done = True  # a cancelled timer must not keep the instance alive
        else:
            self.pending[event_id] = ("timer", node)

    def _fire_later(self, timer_id: int, fire_at: str) -> None:
        event = h.timer_fired(timer_id, fire_at, fire_at)
        payload = {"kind": "event", "event": event, "execution_id": self.execution_id}
        self.outbox.append(Outgoing("message", self.view.instance_id, payload, visible_at=fire_at))

    def _wait(self, node: _Node, name: str) -> None:
        if self.buffered[name]:
            self.buffered[name].popleft()
            node.done = True
        else:
            self.waiters[name].append(node)

    def _send_entity(self, node: _Node, event_id: int, *, signal: bool) -> None:
        action = node.action
        target, operation = action["instanceId"], action["operation"]
        recorded = self.scheduled.get(event_id)
        if self._recorded(event_id, EventType.EVENT_SENT, operation):
            assert recorded is not None
            request_id = json.loads(recorded["Input"])["id"]
        else:
            request_id = str(
                uuid.uuid5(_REQUEST_NAMESPACE, f"{self.view.instance_id}|{self.execution_id}|{event_id}")
            )
            request = {
                "op": operation,
                "id": request_id,
                "input": action.get("input"),
                "parent": None if signal else self.view.instance_id,
                "parentExecution": None if signal else self.execution_id,
                "Timestamp": self.now,
            }
            if signal:
                request["signal"] = True
            request = {k: v for k, v in request.items() if v is not None}
            self.new_events.append(
                h.event_sent(event_id, self.now, target, operation, json.dumps(request))
            )
            self.outbox.append(Outgoing("message", target, {"kind": "op", "request": request}))
        if signal:
            node.done = True
        else:
            self._wait(node, request_id)

    # -- applying history --
    def _apply(self, event: Event) -> None:
        kind = event["EventType"]
        if kind == EventType.ORCHESTRATOR_STARTED:
            self.clock = event["Timestamp"]
        elif kind in (EventType.TASK_COMPLETED, EventType.SUB_ORCHESTRATION_COMPLETED):
            entry = self.pending.pop(event["TaskScheduledId"], None)
            if entry:
                entry[1].done = True
        elif kind in (EventType.TASK_FAILED, EventType.SUB_ORCHESTRATION_FAILED):
            entry = self.pending.pop(event["TaskScheduledId"], None)
            if entry:
                self._attempt_failed(entry[1])
        elif kind == EventType.TIMER_FIRED:
            entry = self.pending.pop(event["TimerId"], None)
            if entry and entry[0] == "retry":
                self._retry_timer_fired(entry[1])
            elif entry:
                entry[1].done = True
        elif kind == EventType.EVENT_RAISED:
            name = event.get("Name") or ""
            if self.waiters[name]:
                self.waiters[name].popleft().done = True
            else:
                self.buffered[name].append(event)

    def _attempt_failed(self, node: _Node) -> None:
        options = node.action.get("retryOptions")
        if options is None:
            node.done = True
            return
        # DTFx's RetryInterceptor waits after every failure, the last one included.
        timer_id = self._next_id()
        interval = timedelta(milliseconds=int(options["firstRetryIntervalInMilliseconds"]))
        fire_at = h.format_time(h.parse_time(self.clock) + interval)
        self.pending[timer_id] = ("retry", node)
        if not self._recorded(timer_id, EventType.TIMER_CREATED, None):
            self.new_events.append(h.timer_created(timer_id, self.now, fire_at))
            self._fire_later(timer_id, fire_at)

    def _retry_timer_fired(self, node: _Node) -> None:
        if node.attempt >= int(node.action["retryOptions"]["maxNumberOfAttempts"]):
            node.done = True
            return
        node.attempt += 1
        if node.action["actionType"] == ActionType.CALL_ACTIVITY_WITH_RETRY:
            self._schedule_activity(node, self._next_id())
        else:
            self._schedule_child(node, self._next_id())

    def unconsumed_events(self) -> list[Event]:
        """Raised events nobody waited for: carried over by continue-as-new."""
        while self.pos < len(self.events):
            self._apply(self.events[self.pos])
            self.pos += 1
        return [e for queue in self.buffered.values() for e in queue]


def _resolved(node: _Node) -> bool:
    kind = node.action["actionType"]
    if kind == ActionType.WHEN_ALL:
        return all(_resolved(c) for c in node.children)
    if kind == ActionType.WHEN_ANY:
        return not node.children or any(_resolved(c) for c in node.children)
    return node.done


# --- the episode ------------------------------------------------------------------------


def run_episode(
    handle: OrchestratorHandle | None,
    view: InstanceView,
    messages: list[tuple[int, dict[str, Any]]],
    now: str,
    new_execution_id: str,
) -> Episode:
    """Decide one episode. ``handle`` None means the orchestrator is not defined."""
    episode = Episode()
    state = _MessageState(view, now, new_execution_id)
    for message_id, message in messages:
        state.accept(message_id, message)
    episode.consumed = sorted(state.consumed)
    if state.terminated is not None:
        return _terminate(episode, state, now)
    if state.suspend_changed:
        episode.status = state.status
    if not state.new_events or state.status not in ("Running",):
        _copy_start(episode, state)
        episode.events = (
            [h.orchestrator_started(now), *state.new_events] if state.new_events else []
        )
        return episode
    return _invoke(handle, episode, state, now)


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

    def accept(self, message_id: int, message: dict[str, Any]) -> None:
        """Apply one message: consume it, drop it (also consumed) or hold it in the inbox."""
        kind = message["kind"]
        if kind == "event" and self._holds(message):
            self.held.append((message_id, message))
            return
        self.consumed.append(message_id)
        if self.terminated is not None:
            return
        if kind == "start":
            self._start(message)
        elif self.status in TERMINAL or self.status is None:
            return  # late messages for a finished (or unknown) instance are dropped
        elif kind == "terminate":
            self.terminated = message.get("reason") or ""
        elif kind == "suspend" and self.status == "Running":
            self.status, self.suspend_changed = "Suspended", True
            self.new_events.append(h.execution_suspended(self.now, message.get("reason")))
        elif kind == "resume" and self.status == "Suspended":
            self.status, self.suspend_changed = "Running", True
            self.new_events.append(h.execution_resumed(self.now, message.get("reason")))
            self._release_held()
        elif kind == "event":
            self._event(message)

    def _holds(self, message: dict[str, Any]) -> bool:
        """Events wait in the inbox while suspended or between executions."""
        return self.terminated is None and self.status in ("Suspended", "ContinuedAsNew", "Pending")

    def _release_held(self) -> None:
        held, self.held = self.held, []
        for message_id, message in held:
            self.consumed.append(message_id)
            self._event(message)

    def _start(self, message: dict[str, Any]) -> None:
        if self.status in ("Running", "Suspended"):
            return  # refused at the API; a stray duplicate start is dropped
        event = dict(message["event"])
        event["OrchestrationInstance"] = {
            "InstanceId": self.view.instance_id,
            "ExecutionId": self.new_execution_id,
        }
        self.started = event
        self.status = "Running"
        self.execution_id = self.new_execution_id
        self.history = []
        self.new_events = [event]
        self._release_held()

    def _event(self, message: dict[str, Any]) -> None:
        target_execution = message.get("execution_id")
        if target_execution and target_execution != self.execution_id:
            return  # a completion for an older execution
        event = message["event"]
        if not _is_duplicate(event, self.history + self.new_events):
            self.new_events.append(event)


def _is_duplicate(event: Event, seen: list[Event]) -> bool:
    """Exactly one completion per scheduled task: later copies are dropped."""
    kind = event["EventType"]
    if kind in h.COMPLETION_TYPES:
        key, field_name = event["TaskScheduledId"], "TaskScheduledId"
    elif kind == EventType.TIMER_FIRED:
        key, field_name = event["TimerId"], "TimerId"
    else:
        return False
    return any(e["EventType"] == kind and e.get(field_name) == key for e in seen) or not any(
        e["EventType"] in h.SCHEDULING_TYPES and e["EventId"] == key for e in seen
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
    episode.status = "Terminated"
    episode.output_json = reason
    started = _execution_started(state.history + state.new_events)
    name = started.get("Name", "") if started else ""
    _notify_parent(
        episode, started, failed=True, text=f"Orchestrator function '{name}' was terminated: {reason}"
    )
    return episode


def _execution_started(events: list[Event]) -> Event | None:
    return next((e for e in events if e["EventType"] == EventType.EXECUTION_STARTED), None)


def _invoke(
    handle: OrchestratorHandle | None, episode: Episode, state: _MessageState, now: str
) -> Episode:
    _copy_start(episode, state)
    events = [*state.history, h.orchestrator_started(now), *state.new_events]
    started = _execution_started(events)
    assert started is not None, "a running instance always has ExecutionStarted"
    name = started["Name"]
    prefix = [h.orchestrator_started(now), *state.new_events]
    if handle is None:
        return _finish_failed(episode, prefix, started, f"The function '{name}' doesn't exist.", now)
    parent = started.get("ParentInstance") or {}
    request = wire.encode_orchestration_request(
        state.view.instance_id,
        events,
        started.get("Input"),
        (parent.get("OrchestrationInstance") or {}).get("InstanceId"),
    )
    try:
        decided = wire.decode_orchestrator_state(handle(request))
    except Exception as exc:  # noqa: BLE001 - user-code failure is data
        decided = wire.decode_orchestrator_exception(str(exc))
    if decided.raw_failure is not None:
        return _finish_failed(episode, prefix, started, decided.raw_failure, now)
    view = InstanceView(state.view.instance_id, "Running", state.execution_id, events, name)
    shim = _Shim(view, events, now, state.execution_id or "")
    try:
        resolved = shim.walk(decided.actions)
    except NonDeterminismError as exc:
        return _finish_failed(episode, prefix, started, str(exc), now)
    if decided.has_custom_status:
        text = wire.encode_json_text(decided.custom_status)
        if len(text.encode("utf-16-le")) // 2 > CUSTOM_STATUS_LIMIT:
            message = f"The custom status exceeds the limit of {CUSTOM_STATUS_LIMIT} characters."
            return _finish_failed(episode, prefix, started, message, now)
        episode.custom_status_json, episode.custom_status_changed = text, True
    episode.events = [*prefix, *shim.new_events]
    episode.outbox = list(shim.outbox)
    episode.status = "Running"
    if resolved and decided.error is not None:
        return _finish_failed(episode, episode.events, started, decided.error, now)
    if resolved and decided.is_done:
        _complete(episode, decided, started, shim, now)
    episode.events.append(h.orchestrator_completed(now))
    return episode


def _complete(
    episode: Episode, decided: wire.OrchestratorState, started: Event, shim: _Shim, now: str
) -> None:
    restart = next(
        (a for a in decided.actions if a["actionType"] == ActionType.CONTINUE_AS_NEW), None
    )
    if restart is not None:
        episode.status = "ContinuedAsNew"
        episode.events.append(h.execution_completed(now, "ContinuedAsNew", None))
        fresh = dict(started, Input=json.dumps(restart.get("input")), Timestamp=now)
        target = shim.view.instance_id
        episode.outbox.append(Outgoing("message", target, {"kind": "start", "event": fresh}))
        for carried in shim.unconsumed_events():
            episode.outbox.append(Outgoing("message", target, {"kind": "event", "event": carried}))
        return
    result = wire.encode_json_text(decided.output) if decided.has_output else None
    episode.status = "Completed"
    episode.output_json = result
    episode.events.append(h.execution_completed(now, "Completed", result))
    _notify_parent(episode, started, failed=False, text=result)


def _finish_failed(
    episode: Episode, prefix: list[Event], started: Event, error: str, now: str
) -> Episode:
    message = f"Orchestrator function '{started['Name']}' failed: {error}"
    output = json.dumps(message)
    episode.events = [*prefix, h.execution_completed(now, "Failed", output)]
    episode.events.append(h.orchestrator_completed(now))
    episode.status = "Failed"
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
        event = h.sub_orchestration_failed(task_id, now, text or "", f"Message: {text}, StackTrace: ")
    else:
        event = h.sub_orchestration_completed(task_id, now, text)
    payload = {"kind": "event", "event": event, "execution_id": instance.get("ExecutionId")}
    episode.outbox.append(Outgoing("message", instance["InstanceId"], payload))
