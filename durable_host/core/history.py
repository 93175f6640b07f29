"""History events as the Durable Task Framework writes them. Pure.

Events are plain dicts in the exact wire shape the Python SDK reads (PascalCase keys,
``EventType`` as an integer, ``Z`` timestamps), because they are stored and handed to
the SDK verbatim: keeping one representation means nothing is converted twice.
Every event carries the four keys the SDK requires (``EventType``, ``EventId``,
``IsPlayed``, ``Timestamp``); factories add the per-type keys the SDK reads
unconditionally (``Version`` on ExecutionStarted, ``Result`` on completions,
``TimerId`` on TimerFired).
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime
from typing import Any

Event = dict[str, Any]


class EventType(enum.IntEnum):
    EXECUTION_STARTED = 0
    EXECUTION_COMPLETED = 1
    EXECUTION_FAILED = 2
    EXECUTION_TERMINATED = 3
    TASK_SCHEDULED = 4
    TASK_COMPLETED = 5
    TASK_FAILED = 6
    SUB_ORCHESTRATION_CREATED = 7
    SUB_ORCHESTRATION_COMPLETED = 8
    SUB_ORCHESTRATION_FAILED = 9
    TIMER_CREATED = 10
    TIMER_FIRED = 11
    ORCHESTRATOR_STARTED = 12
    ORCHESTRATOR_COMPLETED = 13
    EVENT_SENT = 14
    EVENT_RAISED = 15
    CONTINUE_AS_NEW = 16
    GENERIC = 17
    HISTORY_STATE = 18
    EXECUTION_SUSPENDED = 19
    EXECUTION_RESUMED = 20


COMPLETION_TYPES = frozenset(
    {
        EventType.TASK_COMPLETED,
        EventType.TASK_FAILED,
        EventType.SUB_ORCHESTRATION_COMPLETED,
        EventType.SUB_ORCHESTRATION_FAILED,
    }
)
SCHEDULING_TYPES = frozenset(
    {
        EventType.TASK_SCHEDULED,
        EventType.SUB_ORCHESTRATION_CREATED,
        EventType.TIMER_CREATED,
        EventType.EVENT_SENT,
    }
)


_NAMES = {
    # DTFx's EventType names, as the management API shows them.
    EventType.SUB_ORCHESTRATION_CREATED: "SubOrchestrationInstanceCreated",
    EventType.SUB_ORCHESTRATION_COMPLETED: "SubOrchestrationInstanceCompleted",
    EventType.SUB_ORCHESTRATION_FAILED: "SubOrchestrationInstanceFailed",
    EventType.GENERIC: "GenericEvent",
}


def event_type_name(kind: int) -> str:
    """DTFx's name of an event type (``TaskScheduled``, ``GenericEvent``, ...)."""
    try:
        member = EventType(kind)
    except ValueError:
        return str(kind)
    return _NAMES.get(member) or "".join(p.capitalize() for p in member.name.split("_"))


def format_time(moment: datetime) -> str:
    """ISO-8601 UTC with microseconds and ``Z``: what dateutil and ``new_uuid`` expect."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """Inverse of :func:`format_time`; accepts 0-7 fraction digits like dateutil does."""
    body = text.rstrip("Z")
    if "." in body:
        head, frac = body.split(".", 1)
        body = f"{head}.{(frac + '000000')[:6]}"
        return datetime.strptime(body, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    return datetime.strptime(body, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def _event(kind: EventType, at: str, event_id: int = -1, **fields: Any) -> Event:
    return {
        "EventType": int(kind),
        "EventId": event_id,
        "IsPlayed": False,
        "Timestamp": at,
        **fields,
    }


def orchestrator_started(at: str) -> Event:
    return _event(EventType.ORCHESTRATOR_STARTED, at)


def orchestrator_completed(at: str) -> Event:
    return _event(EventType.ORCHESTRATOR_COMPLETED, at)


def execution_started(
    *,
    at: str,
    name: str,
    instance_id: str,
    execution_id: str,
    input_json: str | None,
    version: str | None,
    parent: dict[str, Any] | None = None,
    scheduled_start: str | None = None,
) -> Event:
    """ExecutionStarted; ``input_json`` is the stored JSON text of the input (or None)."""
    return _event(
        EventType.EXECUTION_STARTED,
        at,
        Name=name,
        Version=version or "",
        Input=input_json,
        OrchestrationInstance={"InstanceId": instance_id, "ExecutionId": execution_id},
        ParentInstance=parent,
        Tags=None,
        ScheduledStartTime=scheduled_start,
    )


def execution_completed(at: str, status: str, result: str | None, failure: Any = None) -> Event:
    return _event(
        EventType.EXECUTION_COMPLETED,
        at,
        OrchestrationStatus=status,
        Result=result,
        FailureDetails=failure,
    )


def execution_terminated(at: str, reason: str | None) -> Event:
    return _event(EventType.EXECUTION_TERMINATED, at, Input=reason)


def execution_suspended(at: str, reason: str | None) -> Event:
    return _event(EventType.EXECUTION_SUSPENDED, at, Reason=reason)


def execution_resumed(at: str, reason: str | None) -> Event:
    return _event(EventType.EXECUTION_RESUMED, at, Reason=reason)


def task_scheduled(event_id: int, at: str, name: str, input_json: str | None) -> Event:
    # The extension stores the activity input wrapped in a one-element array.
    return _event(
        EventType.TASK_SCHEDULED,
        at,
        event_id,
        Name=name,
        Version="",
        Input=json.dumps([input_json]),
    )


def task_completed(scheduled_id: int, at: str, result: str | None) -> Event:
    return _event(EventType.TASK_COMPLETED, at, TaskScheduledId=scheduled_id, Result=result)


def task_failed(scheduled_id: int, at: str, reason: str, details: str | None) -> Event:
    return _event(
        EventType.TASK_FAILED,
        at,
        TaskScheduledId=scheduled_id,
        Reason=reason,
        Details=details,
        FailureDetails=None,
    )


def sub_orchestration_created(
    event_id: int, at: str, name: str, instance_id: str, input_json: str | None, version: str | None
) -> Event:
    return _event(
        EventType.SUB_ORCHESTRATION_CREATED,
        at,
        event_id,
        Name=name,
        Version=version or "",
        InstanceId=instance_id,
        Input=input_json,
    )


def sub_orchestration_completed(scheduled_id: int, at: str, result: str | None) -> Event:
    return _event(
        EventType.SUB_ORCHESTRATION_COMPLETED, at, TaskScheduledId=scheduled_id, Result=result
    )


def sub_orchestration_failed(scheduled_id: int, at: str, reason: str, details: str | None) -> Event:
    return _event(
        EventType.SUB_ORCHESTRATION_FAILED,
        at,
        TaskScheduledId=scheduled_id,
        Reason=reason,
        Details=details,
        FailureDetails=None,
    )


def timer_created(event_id: int, at: str, fire_at: str) -> Event:
    return _event(EventType.TIMER_CREATED, at, event_id, FireAt=fire_at)


def timer_fired(timer_id: int, at: str, fire_at: str) -> Event:
    return _event(EventType.TIMER_FIRED, at, TimerId=timer_id, FireAt=fire_at)


def event_sent(event_id: int, at: str, target: str, name: str, input_json: str) -> Event:
    return _event(
        EventType.EVENT_SENT, at, event_id, InstanceId=target, Name=name, Input=input_json
    )


def event_raised(at: str, name: str, input_json: str | None) -> Event:
    return _event(EventType.EVENT_RAISED, at, Name=name, Input=input_json)


def generic_event(at: str, data: str) -> Event:
    """DTFx's GenericEvent: ignored by the SDK; the host writes it where a rewind cleared a step."""
    return _event(EventType.GENERIC, at, Data=data)
