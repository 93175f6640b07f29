"""The .NET side of the extension's out-of-process shim, simulated. Pure.

``Shim.walk`` takes the SDK's action list and the current execution's history and does
what DTFx and ``OutOfProcOrchestrationShim`` do with them (protocol reference §2.5): it
numbers the actions like DTFx's ``idCounter``, matches them against the scheduling events
already in history (a mismatch is a ``NonDeterminismError``), releases action k+1 only once
action k resolved under .NET ``WhenAll``/``WhenAny`` rules (strict scheduling), runs the
retries the SDK only mirrors, and collects the new scheduling events and the outgoing
messages (activity work items, child starts, entity operations, timers) for the rest.
A child started without a version gets the host's ``default_version`` (host.json
``defaultVersion``), as the extension does; the parent's own version goes into the child's
``ParentInstance``.

Non-determinism is named, never silent: a recorded scheduling event that the code now asks
for differently, or that the code no longer asks for at all (``check_replayed``), raises
``NonDeterminismError`` with a message naming the event (type, sequence id, name), what
history recorded and what the code does now.
Each walked action is a ``Node`` that records the sequence ids it took, which is what a
rewind needs to know (``rewind.py``).

The walk is a cursor (``released`` actions started, the ``blocked`` one awaited, ``pos`` in
the events, the id ``counter``, ``pending`` tasks and event ``waiters``), so a live session
(``sessions.py``) keeps one ``Shim`` across episodes: ``resume`` hands it the events added
since, ``walk`` the actions past ``released``, and the state it reaches is the one a walk of
the whole history with the whole action list reaches, because a walk only ever moves
forward over both. What it cannot follow is an action already released that changes
afterwards (a timer cancelled later); the session walks in full then.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from durable_host.core import history as h
from durable_host.core.history import Event, EventType
from durable_host.core.records import MessageKind, Outgoing, OutgoingKind
from durable_host.core.wire import ActionType

_REQUEST_NAMESPACE = uuid.UUID("7b0c3c8e-9a55-4b55-9a39-3b1f0f7c1d11")


class NonDeterminismError(Exception):
    pass


NON_DETERMINISTIC = "Non-Deterministic workflow detected"
CHANGED_CODE = (
    "Was the orchestrator code changed while this instance was running? Keep the old"
    " behaviour for running instances (branch on context.version, docs/versioning.md)."
)
_RETRY_TIMER = {"actionType": ActionType.CREATE_TIMER, "retryTimer": True}


def describe_event(event: Event) -> str:
    """``TaskScheduled #3 (activity 'send')``: a recorded scheduling event, as a reader names it."""
    kind = event["EventType"]
    name = event.get("Name")
    what = {
        EventType.TASK_SCHEDULED: f"activity '{name}'",
        EventType.SUB_ORCHESTRATION_CREATED: f"sub-orchestration '{name}'"
        + (f" instance '{event.get('InstanceId')}'" if event.get("InstanceId") else ""),
        EventType.TIMER_CREATED: f"timer firing at {event.get('FireAt')}",
        EventType.EVENT_SENT: f"entity operation '{name}' on '{event.get('InstanceId')}'",
    }.get(kind, f"'{name}'")
    return f"{h.event_type_name(kind)} #{event.get('EventId')} ({what})"


def describe_action(action: dict[str, Any] | None) -> str:
    """What an SDK action asks for, in the words ``describe_event`` uses."""
    if action is None:
        return "nothing"
    if action.get("retryTimer"):
        return "a retry timer"
    kind = ActionType(action["actionType"])
    name = action.get("functionName")
    if kind in (ActionType.CALL_ACTIVITY, ActionType.CALL_ACTIVITY_WITH_RETRY):
        return f"a call to activity '{name}'"
    if kind in (ActionType.CALL_SUB_ORCHESTRATOR, ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY):
        child = action.get("instanceId")
        return f"sub-orchestration '{name}'" + (f" instance '{child}'" if child else "")
    if kind == ActionType.CREATE_TIMER:
        return f"a timer firing at {action.get('fireAt')}"
    if kind in (ActionType.CALL_ENTITY, ActionType.SIGNAL_ENTITY):
        verb = "a signal of" if kind == ActionType.SIGNAL_ENTITY else "a call of"
        return (
            f"{verb} entity operation '{action.get('operation')}' on '{action.get('instanceId')}'"
        )
    if kind == ActionType.CALL_HTTP:
        request = action.get("httpRequest") or {}
        return f"an HTTP call ({request.get('method')} {request.get('uri')})"
    if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return f"a wait for external event '{action.get('externalEventName')}'"
    if kind in (ActionType.WHEN_ALL, ActionType.WHEN_ANY):
        children = action.get("compoundActions") or []
        return f"{kind.name.lower()} of [{', '.join(describe_action(c) for c in children)}]"
    return kind.name.lower().replace("_", " ")


@dataclass(frozen=True, slots=True)
class InstanceView:
    """What the engine knows about an instance before the episode."""

    instance_id: str
    status: str | None  # None: never started
    execution_id: str | None
    history: list[Event]
    name: str | None = None


_APPLIED = frozenset(
    {
        EventType.ORCHESTRATOR_STARTED,
        EventType.TASK_COMPLETED,
        EventType.SUB_ORCHESTRATION_COMPLETED,
        EventType.TASK_FAILED,
        EventType.SUB_ORCHESTRATION_FAILED,
        EventType.TIMER_FIRED,
        EventType.EVENT_RAISED,
    }
)


@dataclass(eq=False)
class Node:
    action: dict[str, Any]
    children: list[Node] = field(default_factory=list)
    done: bool = False
    attempt: int = 1
    failed: bool = False  # resolved by a failure (after its last retry, if any)
    ids: list[int] = field(default_factory=list)  # every sequence id it took, retries included


class Shim:
    """Replays history against the action list the way DTFx + the shim would."""

    def __init__(
        self,
        view: InstanceView,
        events: list[Event],
        now: str,
        execution_id: str,
        default_version: str | None = None,
    ):
        self.view = view
        self.default_version = default_version
        started = next((e for e in events if e["EventType"] == EventType.EXECUTION_STARTED), {})
        self.version = started.get("Version") or ""
        self.scheduled = {e["EventId"]: e for e in events if e["EventType"] in h.SCHEDULING_TYPES}
        # Recorded scheduling events no action has matched yet (``check_replayed``).
        self.unclaimed: set[int] = set(self.scheduled)
        self.last_action: dict[str, Any] | None = None
        # Only the events ``_apply`` acts on: the rest would be skipped one by one.
        self.events = [e for e in events if e["EventType"] in _APPLIED]
        self.pos = 0
        self.counter = 0
        self.clock = now
        self.now = now
        self.execution_id = execution_id
        self.pending: dict[int, tuple[str, Node]] = {}
        self.waiters: dict[str, deque[Node]] = defaultdict(deque)
        self.buffered: dict[str, deque[Event]] = defaultdict(deque)
        self.new_events: list[Event] = []
        self.outbox: list[Outgoing] = []
        self.nodes: list[Node] = []
        self.released = 0  # top-level actions started so far
        self.blocked: Node | None = None  # the released action the walk waits on

    def resume(self, events: list[Event], now: str) -> bool:
        """Continue into the next episode: ``events`` are those added to the history since
        this walk was given it (its own last decisions first). False, and unchanged, if
        they hold a scheduling event this walk did not decide: it does not fit that history."""
        decided = {e["EventId"] for e in self.new_events if e["EventType"] in h.SCHEDULING_TYPES}
        if any(
            e["EventType"] in h.SCHEDULING_TYPES and e["EventId"] not in decided for e in events
        ):
            return False
        for event in events:
            kind = event["EventType"]
            if kind in h.SCHEDULING_TYPES:
                self.scheduled[event["EventId"]] = event
            elif kind in _APPLIED:
                self.events.append(event)
        self.now = now
        self.new_events, self.outbox = [], []
        return True

    # -- walking actions --
    def walk(self, actions: list[dict[str, Any]], first: int = 0) -> bool:
        """Release actions in order; True if every action resolved.

        ``actions[0]`` is action number ``first``; those below ``released`` were started by
        an earlier call (``first`` must not be above ``released``). The walk goes on from
        the action it waited on, so a later call with more actions or (after ``resume``)
        more events continues where this one stopped."""
        if self.blocked is not None:
            if not self._await(self.blocked):
                return False
            self.blocked = None
        assert first <= self.released, "actions past the released ones are missing"
        for action in actions[self.released - first :]:
            self.last_action = action
            node = self._start(action)
            self.released += 1
            if not self._await(node):
                self.blocked = node
                return False
        return True

    def _await(self, node: Node) -> bool:
        while not resolved(node):
            if self.pos >= len(self.events):
                return False
            self._apply(self.events[self.pos])
            self.pos += 1
        return True

    def _start(self, action: dict[str, Any]) -> Node:
        node = Node(action)
        self.nodes.append(node)
        kind = ActionType(action["actionType"])
        if kind in (ActionType.WHEN_ALL, ActionType.WHEN_ANY):
            node.children = [self._start(child) for child in action.get("compoundActions", [])]
        elif kind in (ActionType.CALL_ACTIVITY, ActionType.CALL_ACTIVITY_WITH_RETRY):
            self._schedule_activity(node, self._next_id())
        elif kind in (
            ActionType.CALL_SUB_ORCHESTRATOR,
            ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY,
        ):
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

    def _recorded(
        self, event_id: int, kind: EventType, name: str | None, action: dict[str, Any]
    ) -> bool:
        """True if history already holds this scheduling event; raise on a mismatch."""
        event = self.scheduled.get(event_id)
        if event is None:
            return False
        recorded_name = event.get("Name")
        if event["EventType"] != kind or (
            name is not None and str(recorded_name).lower() != name.lower()
        ):
            raise NonDeterminismError(
                f"{NON_DETERMINISTIC}: history event {describe_event(event)} was expected,"
                f" but the orchestrator code now schedules {describe_action(action)} with"
                f" sequence id {event_id}. {CHANGED_CODE}"
            )
        self.unclaimed.discard(event_id)
        return True

    def check_replayed(self) -> None:
        """Raise if history holds a scheduling event that the code no longer asks for.

        Call after ``walk``: every recorded scheduling event must have been matched by an
        action (DTFx fails such a replay too; the SDK alone would silently park the result).
        """
        for event_id in sorted(self.unclaimed):
            event = self.scheduled[event_id]
            now = (
                f"its last action is {describe_action(self.last_action)}"
                if self.last_action is not None
                else "it schedules nothing"
            )
            raise NonDeterminismError(
                f"{NON_DETERMINISTIC}: history event {describe_event(event)} was expected,"
                f" but the orchestrator code no longer schedules it ({now}). {CHANGED_CODE}"
            )

    def _schedule_activity(self, node: Node, event_id: int) -> None:
        name, input_json = node.action["functionName"], node.action.get("input")
        node.ids.append(event_id)
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.TASK_SCHEDULED, name, node.action):
            return
        self.new_events.append(h.task_scheduled(event_id, self.now, name, input_json))
        payload = {
            "instance_id": self.view.instance_id,
            "execution_id": self.execution_id,
            "task_id": event_id,
            "name": name,
            "input_json": input_json,
        }
        self.outbox.append(Outgoing(OutgoingKind.ACTIVITY, self.view.instance_id, payload))

    def _schedule_http(self, node: Node, event_id: int) -> None:
        request = node.action["httpRequest"]
        node.ids.append(event_id)
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.TASK_SCHEDULED, "BuiltIn::HttpActivity", node.action):
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
        self.outbox.append(Outgoing(OutgoingKind.ACTIVITY, self.view.instance_id, payload))

    def _schedule_child(self, node: Node, event_id: int) -> None:
        action = node.action
        name = action["functionName"]
        child_id = action.get("instanceId") or f"{self.execution_id}:{event_id}"
        node.ids.append(event_id)
        self.pending[event_id] = ("task", node)
        if self._recorded(event_id, EventType.SUB_ORCHESTRATION_CREATED, name, action):
            return
        input_json = json.dumps(action.get("input"))
        # The SDK sends "version": null when the call names none: the host's default applies.
        version = action.get("version")
        if version is None:
            version = self.default_version
        self.new_events.append(
            h.sub_orchestration_created(event_id, self.now, name, child_id, input_json, version)
        )
        start = child_start(
            name,
            child_id,
            input_json,
            version,
            self.view,
            self.execution_id,
            event_id,
            self.now,
            parent_version=self.version,
        )
        message = {"kind": MessageKind.START, "event": start}
        self.outbox.append(Outgoing(OutgoingKind.MESSAGE, child_id, message))

    def _schedule_timer(self, node: Node, event_id: int) -> None:
        fire_at = node.action["fireAt"]
        canceled = bool(node.action.get("isCanceled"))
        if not self._recorded(event_id, EventType.TIMER_CREATED, None, node.action):
            self.new_events.append(h.timer_created(event_id, self.now, fire_at))
            if not canceled:
                self._fire_later(event_id, fire_at)
        if canceled:
            node.done = True  # a cancelled timer must not keep the instance alive
        else:
            self.pending[event_id] = ("timer", node)

    def _fire_later(self, timer_id: int, fire_at: str) -> None:
        event = h.timer_fired(timer_id, fire_at, fire_at)
        payload = {"kind": MessageKind.EVENT, "event": event, "execution_id": self.execution_id}
        self.outbox.append(
            Outgoing(OutgoingKind.MESSAGE, self.view.instance_id, payload, visible_at=fire_at)
        )

    def _wait(self, node: Node, name: str) -> None:
        if self.buffered[name]:
            self.buffered[name].popleft()
            node.done = True
        else:
            self.waiters[name].append(node)

    def _send_entity(self, node: Node, event_id: int, *, signal: bool) -> None:
        action = node.action
        target, operation = action["instanceId"], action["operation"]
        recorded = self.scheduled.get(event_id)
        if self._recorded(event_id, EventType.EVENT_SENT, operation, action):
            assert recorded is not None
            request_id = json.loads(recorded["Input"])["id"]
        else:
            request_id = str(
                uuid.uuid5(
                    _REQUEST_NAMESPACE, f"{self.view.instance_id}|{self.execution_id}|{event_id}"
                )
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
            message = {"kind": MessageKind.OP, "request": request}
            self.outbox.append(Outgoing(OutgoingKind.MESSAGE, target, message))
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

    def _attempt_failed(self, node: Node) -> None:
        options = node.action.get("retryOptions")
        if options is None:
            node.done = node.failed = True
            return
        # DTFx's RetryInterceptor waits after every failure, the last one included.
        timer_id = self._next_id()
        node.ids.append(timer_id)
        interval = timedelta(milliseconds=int(options["firstRetryIntervalInMilliseconds"]))
        fire_at = h.format_time(h.parse_time(self.clock) + interval)
        self.pending[timer_id] = ("retry", node)
        if not self._recorded(timer_id, EventType.TIMER_CREATED, None, _RETRY_TIMER):
            self.new_events.append(h.timer_created(timer_id, self.now, fire_at))
            self._fire_later(timer_id, fire_at)

    def _retry_timer_fired(self, node: Node) -> None:
        if node.attempt >= int(node.action["retryOptions"]["maxNumberOfAttempts"]):
            node.done = node.failed = True
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


def resolved(node: Node) -> bool:
    kind = node.action["actionType"]
    if kind == ActionType.WHEN_ALL:
        return all(resolved(c) for c in node.children)
    if kind == ActionType.WHEN_ANY:
        return not node.children or any(resolved(c) for c in node.children)
    return node.done


def child_start(
    name: str,
    child_id: str,
    input_json: str | None,
    version: str | None,
    view: InstanceView,
    execution_id: str,
    event_id: int,
    at: str,
    parent_version: str = "",
) -> Event:
    """The ExecutionStarted a parent sends to start (or restart) a sub-orchestration."""
    return h.execution_started(
        at=at,
        name=name,
        instance_id=child_id,
        execution_id="",
        input_json=input_json,
        version=version,
        parent={
            "Name": view.name,
            "Version": parent_version,
            "TaskScheduleId": event_id,
            "OrchestrationInstance": {"InstanceId": view.instance_id, "ExecutionId": execution_id},
        },
    )
