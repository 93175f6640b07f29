"""Rewind of a Failed instance: which steps run again, and the history that says so. Pure.

Like DTFx's Azure Storage provider (``AzureTableTrackingStore.RewindHistoryAsync``): every
failure event of the failed execution - TaskFailed, SubOrchestrationInstanceFailed and the
ExecutionCompleted(Failed) - becomes a GenericEvent (``Data: "Rewound: <type> <id>"``), and
so does the TaskScheduled of a failed activity, so the replay schedules it again under the
same sequence id; completed steps stay. A failed sub-orchestration keeps its
SubOrchestrationInstanceCreated and is sent a rewind in turn (carrying a fresh start, used
if the child did not fail - say it was terminated). Two additions keep Python's sequence
numbers consistent: a retry that ran out of attempts is rewound whole (every attempt and
every retry timer, so it starts over with its full budget; the shim's nodes say which ids
it took), and a step left without an outcome when the instance failed (a result that came
later was dropped) runs again. The rewound instance is Running again in the same execution.
Entity calls still waiting for a response are left as they are.
"""

from __future__ import annotations

from typing import Any

from durable_host.core import history as h
from durable_host.core.history import Event, EventType
from durable_host.core.records import MessageKind, Outgoing, OutgoingKind
from durable_host.core.shim import InstanceView, Node, child_start

_RERUN_SCHEDULING = frozenset(
    {EventType.TASK_SCHEDULED, EventType.SUB_ORCHESTRATION_CREATED, EventType.TIMER_CREATED}
)


def plan(history: list[Event], nodes: list[Node]) -> tuple[set[int], set[int]]:
    """Ids to run again, and ids of failed children to rewind where they are."""
    rerun: set[int] = set()
    in_place: set[int] = set()
    for event in history:
        if event["EventType"] == EventType.TASK_FAILED:
            rerun.add(event["TaskScheduledId"])
        elif event["EventType"] == EventType.SUB_ORCHESTRATION_FAILED:
            in_place.add(event["TaskScheduledId"])
    for node in nodes:
        if node.failed and node.action.get("retryOptions"):
            rerun.update(node.ids)
            in_place.difference_update(node.ids)
    scheduled = {e["EventId"] for e in history if e["EventType"] in _RERUN_SCHEDULING}
    outcomes = {_outcome_key(e) for e in history} - {None}
    rerun.update(scheduled - outcomes)  # the outcome never arrived (dropped while Failed)
    return rerun, in_place


def _outcome_key(event: Event) -> Any:
    kind = event["EventType"]
    if kind in h.COMPLETION_TYPES:
        return event["TaskScheduledId"]
    if kind == EventType.TIMER_FIRED:
        return event["TimerId"]
    return None


def _step_key(event: Event) -> Any:
    """The sequence id a scheduling or outcome event belongs to (None for other events)."""
    if event["EventType"] in _RERUN_SCHEDULING:
        return event["EventId"]
    return _outcome_key(event)


def rewrite(
    history: list[Event],
    rerun: set[int],
    in_place: set[int],
    view: InstanceView,
    execution_id: str,
    reason: str,
) -> tuple[list[Event], list[Outgoing]]:
    """The rewound history, and the rewinds to send to failed children."""
    events: list[Event] = []
    outbox: list[Outgoing] = []
    for event in history:
        kind, key = event["EventType"], _step_key(event)
        if kind == EventType.SUB_ORCHESTRATION_CREATED and key in in_place:
            events.append(event)
            outbox.append(_child_rewind(event, view, execution_id, reason))
        elif kind == EventType.EXECUTION_COMPLETED or key in rerun or key in in_place:
            label = h.event_type_name(kind) + ("" if key is None else f" {key}")
            events.append(h.generic_event(event["Timestamp"], f"Rewound: {label}"))
        else:
            events.append(event)
    return events, outbox


def _child_rewind(created: Event, view: InstanceView, execution_id: str, reason: str) -> Outgoing:
    start = child_start(
        created["Name"],
        created["InstanceId"],
        created.get("Input"),
        created.get("Version"),
        view,
        execution_id,
        created["EventId"],
        created["Timestamp"],
    )
    payload = {"kind": MessageKind.REWIND, "reason": reason, "start": start}
    return Outgoing(OutgoingKind.MESSAGE, created["InstanceId"], payload)
