"""The durable client operations, shared by the management webhooks and the SDK's RPC.

Each operation validates its input, writes what it accepts durably (one store
transaction) and wakes the engine; a rejected request writes nothing. Failures are
``ClientError`` values carrying the HTTP status and body the extension answers with
(``HttpApiHandler``): an ASP.NET ``HttpError`` object (``Message`` and, for errors that
wrap an exception, ``ExceptionMessage``/``ExceptionType``/``StackTrace``), or a bare JSON
string where the extension answers with ``CreateResponse(code, "text")``.

Every read and write of the task hub that the HTTP front ends (management webhooks, the
SDK's RPC) need goes through ``DurableClient``: they never reach the store themselves.

Rewind: see ``orchestration`` (the engine rewrites the history in an episode, so a
rewind is an inbox message like any other control operation). Restart: the instance's
name, stored input and version start again, under a new id or the same one (the same id
follows ``overridableExistingInstanceStates``, as a start does).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass
from typing import Any

from durable_host.core import history as h
from durable_host.core import orchestration, wire
from durable_host.core.records import (
    TERMINAL,
    InstanceRecord,
    MessageKind,
    Query,
    QueryPage,
    RuntimeStatus,
)
from durable_host.engine.loops import Engine
from durable_host.ops import telemetry
from durable_host.store.base import InstanceExistsError

_BAD_ID = re.compile(r"[/\\#?\x00-\x1f\x7f]")
# Lone surrogates cannot be stored as text (UTF-8 has no encoding for them).
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_INSTANCE_ID = 256
MAX_ENTITY_NAME = 128  # a Functions function name; the SDK lower-cases entity names
MAX_OPERATION_NAME = 256


ARGUMENT_ERROR = "One or more of the arguments submitted is incorrect"
INVALID_JSON = "Invalid JSON content"
ALREADY_EXISTS = "DurableTask.Core.Exceptions.OrchestrationAlreadyExistsException"


@dataclass
class ClientError(Exception):
    """A refused request. ``body()`` is what the extension would answer.

    400 without ``title``: the handler-wide ``ArgumentException`` answer (``Message`` is
    the generic text, ``ExceptionMessage`` says what was wrong). With ``title``: an
    ``HttpError`` titled ``title`` wrapping ``message``. ``plain``: a bare JSON string.
    ``message_only`` (and any other status): ``{"Message": message}``.
    """

    status: int
    message: str
    exception_type: str = "System.ArgumentException"
    title: str | None = None
    plain: bool = False
    message_only: bool = False

    def body(self) -> Any:
        if self.plain:
            return self.message
        if self.message_only:
            return {"Message": self.message}
        if self.title is not None:
            return {
                "Message": self.title,
                "ExceptionMessage": self.message,
                "ExceptionType": self.exception_type,
                "StackTrace": None,
            }
        if self.status == 400:
            return {
                "Message": ARGUMENT_ERROR,
                "ExceptionMessage": self.message,
                "ExceptionType": self.exception_type,
                "StackTrace": None,
            }
        return {"Message": self.message}


# The extension's ``DurableClient.SuspendAsync``/``ResumeAsync`` accept only these states.
SUSPENDABLE = (RuntimeStatus.RUNNING, RuntimeStatus.PENDING, RuntimeStatus.CONTINUED_AS_NEW)
# The extension's ``HttpApiHandler`` catch-all: any exception but ``ArgumentException``.
WRONG_STATE = 500
CATCH_ALL = "Something went wrong while processing your request"


def _require_state(record: InstanceRecord, action: str, allowed: tuple[str, ...]) -> None:
    """Refuse a suspend/resume the extension refuses (a suspended or not-yet-suspended one).

    The extension throws ``InvalidOperationException`` there, which its handler's catch-all
    answers with 500 and an ``HttpError`` (``Message`` the catch-all's text,
    ``ExceptionMessage`` the reason). The host answers the same, so the SDK client raises the
    text it raises on Azure (``The operation failed with an unexpected status code 500``),
    which Microsoft's e2e scenarios assert. Nothing is stored.
    """
    if record.status not in allowed:
        raise ClientError(
            WRONG_STATE,
            f"Cannot {action} the orchestration instance {record.instance_id} because"
            f" instance is in the {record.status} state.",
            "System.InvalidOperationException",
            title=CATCH_ALL,
        )


def validate_instance_id(instance_id: str) -> None:
    if not instance_id or len(instance_id) > MAX_INSTANCE_ID:
        raise ClientError(400, "Instance ID must be between 1 and 256 characters.")
    if instance_id.startswith("@"):
        raise ClientError(400, f"Instance ID '{instance_id}' must not start with '@'.")
    if _BAD_ID.search(instance_id) or _SURROGATE.search(instance_id):
        raise ClientError(
            400,
            f"Instance ID {instance_id!r} must not contain /, \\, #, ?, control characters"
            " or lone surrogates.",
        )


def validate_entity_id(name: str, key: str) -> None:
    """An entity id that fits an instance id (``@name@key``, at most 256 characters); a 400
    naming the field otherwise. Checked wherever the HTTP side names an entity."""
    if not 1 <= len(name) <= MAX_ENTITY_NAME:
        raise ClientError(400, f"The entity name must be 1 to {MAX_ENTITY_NAME} characters.")
    room = MAX_INSTANCE_ID - len(name) - 2
    if len(key) > room:
        raise ClientError(
            400,
            f"The entity key must be at most {room} characters: the entity's instance id"
            f" '@{name.lower()}@<key>' is limited to {MAX_INSTANCE_ID}.",
        )
    for field, value in (("name", name), ("key", key)):
        if _BAD_ID.search(value) or _SURROGATE.search(value):
            raise ClientError(
                400,
                f"The entity {field} {value[:64]!r} must not contain /, \\, #, ?,"
                " control characters or lone surrogates.",
            )


class DurableClient:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.store = engine.store

    async def start(
        self,
        name: str,
        instance_id: str | None,
        input_json: str | None,
        version: str | None = None,
        scheduled_start: str | None = None,
    ) -> str:
        info = self.engine.index.orchestrator(name)
        if info is None or info.disabled:
            orchestrators = self.engine.index.orchestrators.values()
            known = ", ".join(f"'{i.name}'" for i in orchestrators if not i.disabled)
            raise ClientError(
                400,
                f"{orchestration.missing_orchestrator_message(name)} Additional info: The"
                f" following are the known orchestrator functions: {known or 'none'}.",
            )
        instance_id = instance_id or uuid.uuid4().hex
        validate_instance_id(instance_id)
        now = self.engine.now()
        version = version if version is not None else self.engine.config.default_version
        start = h.execution_started(
            at=now,
            name=info.name if name.lower() == info.name.lower() else name,
            instance_id=instance_id,
            execution_id="",
            input_json=input_json,
            version=version,
            scheduled_start=scheduled_start,
        )
        record = InstanceRecord(
            instance_id=instance_id,
            name=start["Name"],
            status=RuntimeStatus.PENDING,
            version=version,
            input_json=input_json,
            created_at=now,
            updated_at=now,
        )
        message = {"kind": MessageKind.START, "event": start}
        later = bool(scheduled_start and scheduled_start > now)
        try:
            with telemetry.creating_orchestration(start, instance_id):  # its trace, in `start`
                message_id = await self.store.create_instance(
                    record,
                    message,
                    self.engine.config.overridable_states,
                    visible_at=scheduled_start,
                    count_first=not later and self.engine.counts_first(message),
                )
        except InstanceExistsError as exc:
            raise ClientError(409, str(exc), ALREADY_EXISTS) from exc
        if later:
            self.engine.wake_timers()
        else:
            self.engine.started(instance_id, message_id, message, now)
        return instance_id

    async def require(self, instance_id: str) -> InstanceRecord:
        record = await self.store.get_instance(instance_id)
        if record is None or instance_id.startswith("@"):
            raise ClientError(404, f"No instance with ID '{instance_id}' found.")
        return record

    async def require_running(self, instance_id: str) -> InstanceRecord:
        """The instance, if it exists (else 404) and has not finished (else 410)."""
        record = await self.require(instance_id)
        if record.status in TERMINAL:
            raise ClientError(410, f"The instance '{instance_id}' is {record.status}.")
        return record

    async def _control(
        self, instance_id: str, message: dict[str, Any], *, checked: bool = False
    ) -> None:
        if not checked:
            await self.require_running(instance_id)
        await self.store.send(instance_id, message, self.engine.now())
        self.engine.notify(instance_id)

    async def raise_event(self, instance_id: str, name: str, input_json: str | None) -> None:
        event = h.event_raised(self.engine.now(), name, input_json)
        await self._control(instance_id, {"kind": MessageKind.EVENT, "event": event})

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        await self._control(instance_id, {"kind": MessageKind.TERMINATE, "reason": reason})

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        record = await self.require_running(instance_id)
        _require_state(record, "suspend", SUSPENDABLE)
        message = {"kind": MessageKind.SUSPEND, "reason": reason}
        await self._control(instance_id, message, checked=True)

    async def resume(self, instance_id: str, reason: str | None) -> None:
        record = await self.require_running(instance_id)
        _require_state(record, "resume", (RuntimeStatus.SUSPENDED,))
        message = {"kind": MessageKind.RESUME, "reason": reason}
        await self._control(instance_id, message, checked=True)

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """Rewind a Failed instance: its failed steps run again (see ``orchestration``)."""
        record = await self.store.get_instance(instance_id)
        if record is None or instance_id.startswith("@"):
            # The extension's text, its stray '$' included.
            text = f'No orchestration with instance ID "${instance_id}" found.'
            raise ClientError(404, text, plain=True)
        if record.status != RuntimeStatus.FAILED:
            raise ClientError(
                412,
                f"This orchestration has status {record.status}, but only orchestrations in"
                ' the "Failed" state can be rewound.',
                plain=True,
            )
        # Pending from here on, as DTFx's rewind leaves it, until the rewind episode runs.
        message = {"kind": MessageKind.REWIND, "reason": reason}
        await self.store.send(instance_id, message, self.engine.now(), status=RuntimeStatus.PENDING)
        self.engine.notify(instance_id)

    async def restart(self, instance_id: str, new_instance_id: bool = True) -> str:
        """Start the instance's orchestrator again with its input; the id of the new run."""
        record = await self.store.get_instance(instance_id)
        if record is None or instance_id.startswith("@"):
            raise ClientError(
                400,
                f"An orchestration with the instanceId {instance_id} was not found.",
                title="InstanceId does not match a valid orchestration instance.",
            )
        target = uuid.uuid4().hex if new_instance_id else instance_id
        try:
            return await self.start(record.name, target, record.input_json, record.version)
        except ClientError as exc:
            if exc.status != 409:
                raise
            raise ClientError(
                409,
                exc.message,
                ALREADY_EXISTS,
                title="A non-terminal instance with this instance ID already exists.",
            ) from exc

    async def status(
        self,
        instance_id: str,
        *,
        show_input: bool = True,
        show_history: bool = False,
        show_history_output: bool = False,
    ) -> dict[str, Any] | None:
        record = await self.store.get_instance(instance_id)
        if record is None:
            return self._parked_status(instance_id)
        payload = status_payload(record, show_input, self.engine.parking.status(instance_id))
        if show_history and record.status != RuntimeStatus.PENDING:  # the extension shows none yet
            events = await self.store.get_history(instance_id)
            payload["historyEvents"] = transform_history(events, show_history_output)
        return payload

    async def query(
        self, query: Query, show_input: bool = True
    ) -> tuple[list[dict[str, Any]], str | None]:
        page = await self.store.query(query)
        parking = self.engine.parking
        payloads = [
            status_payload(r, show_input, parking.status(r.instance_id)) for r in page.records
        ]
        return payloads, page.continuation

    def _parked_status(self, instance_id: str) -> dict[str, Any] | None:
        """A sub-orchestration whose start this host left untouched has no record yet: its
        status is Pending, from what the engine knows, so a waiting child is visible too."""
        parked = self.engine.parking.verdict(instance_id)
        if parked is None:
            return None
        verdict, since = parked
        record = InstanceRecord(
            instance_id=instance_id,
            name=verdict.name,
            status=RuntimeStatus.PENDING,
            version=verdict.version,
            created_at=since,
            updated_at=since,
        )
        return status_payload(record, True, verdict.to_status(since))

    async def purge(self, instance_id: str) -> int:
        record = await self.store.get_instance(instance_id)
        if record is None:
            return 0
        if record.status not in TERMINAL and not instance_id.startswith("@"):
            raise ClientError(
                412,
                "Only orchestrations in a terminal state can be purged, but the orchestration"
                f" with instance ID {instance_id} has status {record.status}",
                plain=True,
            )
        return await self.store.purge(instance_id)

    async def purge_many(self, query: Query) -> int:
        """Purge every instance ``query`` matches (the management API's bulk delete)."""
        return await self.store.purge_many(query)

    # --- entities ---

    async def signal_entity(
        self, name: str, key: str, operation: str, input_json: str | None
    ) -> str:
        validate_entity_id(name, key)
        if self.engine.index.entity(name) is None:
            raise ClientError(404, f"No entity function named '{name}' is defined by this app.")
        if not key:
            raise ClientError(400, "The entity key of a signal must not be empty.")
        if not 1 <= len(operation) <= MAX_OPERATION_NAME or _SURROGATE.search(operation):
            raise ClientError(
                400,
                f"The entity operation must be 1 to {MAX_OPERATION_NAME} characters"
                " (no lone surrogates).",
            )
        request_id = str(uuid.uuid4())
        request = {"op": operation, "id": request_id, "signal": True, "input": input_json}
        target = wire.entity_instance_id(name, key)
        telemetry.stamp_signal(request)
        message = {"kind": MessageKind.OP, "request": request}
        await self.store.send(target, message, self.engine.now())
        self.engine.notify(target)
        return request_id

    async def read_entity(self, name: str, key: str) -> InstanceRecord | None:
        validate_entity_id(name, key)
        record = await self.store.get_instance(wire.entity_instance_id(name, key))
        return record if record is not None and record.entity_exists else None

    async def query_entities(self, name: str, query: Query) -> QueryPage:
        """One page of the instances of entity ``name`` (deleted ones included: they have
        ``entity_exists`` False; the caller decides what to show)."""
        return await self.store.query(
            dataclasses.replace(query, prefix=wire.entity_instance_id(name, ""))
        )


def _api_time(stamp: str) -> str:
    return stamp[:19] + "Z" if stamp else stamp


def status_payload(
    record: InstanceRecord, show_input: bool, version_block: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The extension's status fields, plus ``version`` (the instance's orchestration version)
    and, while this host leaves the instance untouched for its version, ``versionBlock``
    (``docs/versioning.md``): ``customStatus`` stays the orchestrator's own."""
    output = record.output_json
    payload = {
        "name": record.name,
        "instanceId": record.instance_id,
        "runtimeStatus": record.status,
        "input": wire.parse_stored(record.input_json) if show_input else None,
        "customStatus": wire.parse_stored(record.custom_status_json),
        "output": wire.parse_stored(output),
        "createdTime": _api_time(record.created_at),
        "lastUpdatedTime": _api_time(record.updated_at),
        "version": record.version or "",
    }
    if version_block is not None:
        payload["versionBlock"] = version_block
    return payload


def transform_history(events: list[dict[str, Any]], with_output: bool) -> list[dict[str, Any]]:
    """The extension's history view (``DurableClient.GetDurableOrchestrationStatusAsync``).

    Event types become names; ``EventId``/``IsPlayed`` go; OrchestratorStarted/-Completed
    go; a TaskScheduled/SubOrchestrationInstanceCreated that has an outcome is merged into
    that outcome as ``FunctionName`` + ``ScheduledTime`` (one still waiting stays, minus
    ``Version``/``Input``); ``Result`` is shown (parsed) only with ``with_output``;
    ExecutionStarted shows ``FunctionName`` instead of its name, input and parent;
    ExecutionTerminated and EventRaised lose ``Input``, TimerFired its ``TimerId``.
    """
    scheduled: dict[tuple[str, Any], int] = {}
    merged: set[int] = set()
    rows: list[dict[str, Any] | None] = []
    for index, event in enumerate(events):
        row = _history_row(event, with_output)
        kind = event["EventType"]
        if kind in _SCHEDULING_ROWS:
            scheduled[(_SCHEDULING_ROWS[kind], event.get("EventId"))] = index
        elif kind in _OUTCOME_ROWS and row is not None:
            origin = scheduled.get((_OUTCOME_ROWS[kind], event.get("TaskScheduledId")))
            if origin is not None:
                row["ScheduledTime"] = events[origin]["Timestamp"]
                row["FunctionName"] = events[origin].get("Name")
                merged.add(origin)
        rows.append(row)
    return [row for i, row in enumerate(rows) if row is not None and i not in merged]


_SCHEDULING_ROWS = {
    h.EventType.TASK_SCHEDULED: "task",
    h.EventType.SUB_ORCHESTRATION_CREATED: "sub",
}
_OUTCOME_ROWS = {
    h.EventType.TASK_COMPLETED: "task",
    h.EventType.TASK_FAILED: "task",
    h.EventType.SUB_ORCHESTRATION_COMPLETED: "sub",
    h.EventType.SUB_ORCHESTRATION_FAILED: "sub",
}
_DROPPED_FIELDS = {
    h.EventType.EXECUTION_STARTED: (
        "Name",
        "OrchestrationInstance",
        "ParentInstance",
        "Version",
        "Tags",
        "Input",
    ),
    h.EventType.TASK_SCHEDULED: ("Version", "Input"),
    h.EventType.SUB_ORCHESTRATION_CREATED: ("Version", "Input"),
    h.EventType.EXECUTION_TERMINATED: ("Input",),
    h.EventType.EVENT_RAISED: ("Input",),
    h.EventType.TIMER_FIRED: ("TimerId",),
    h.EventType.TASK_COMPLETED: ("TaskScheduledId",),
    h.EventType.TASK_FAILED: ("TaskScheduledId",),
    h.EventType.SUB_ORCHESTRATION_COMPLETED: ("TaskScheduledId",),
    h.EventType.SUB_ORCHESTRATION_FAILED: ("TaskScheduledId",),
}
_WITH_RESULT = (
    h.EventType.TASK_COMPLETED,
    h.EventType.SUB_ORCHESTRATION_COMPLETED,
    h.EventType.EXECUTION_COMPLETED,
)


def _history_row(event: dict[str, Any], with_output: bool) -> dict[str, Any] | None:
    kind = event["EventType"]
    if kind in (h.EventType.ORCHESTRATOR_STARTED, h.EventType.ORCHESTRATOR_COMPLETED):
        return None
    row = {k: v for k, v in event.items() if k not in ("EventId", "IsPlayed")}
    row["EventType"] = h.event_type_name(kind)
    for key in _DROPPED_FIELDS.get(kind, ()):
        row.pop(key, None)
    if kind == h.EventType.EXECUTION_STARTED:
        row["FunctionName"] = event.get("Name")
    if kind in _WITH_RESULT:
        if with_output:
            row["Result"] = wire.parse_stored(event.get("Result"))
        else:
            row.pop("Result", None)
    return row
