"""The durable client operations, shared by the management webhooks and the SDK's RPC.

Each operation validates its input, writes what it accepts durably (one store
transaction) and wakes the engine; a rejected request writes nothing. Failures are
``ClientError`` values carrying the HTTP status the extension answers with.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from durable_host import history as h
from durable_host import wire
from durable_host.engine import Engine
from durable_host.store.base import InstanceExistsError, InstanceRecord, Query

TERMINAL = ("Completed", "Failed", "Terminated", "Canceled")
_BAD_ID = re.compile(r"[/\\#?\x00-\x1f\x7f]")


@dataclass
class ClientError(Exception):
    status: int
    message: str
    exception_type: str = "System.ArgumentException"

    def body(self) -> dict[str, Any]:
        if self.status == 400:
            return {
                "Message": "One or more of the arguments submitted is incorrect",
                "ExceptionMessage": self.message,
                "ExceptionType": self.exception_type,
                "StackTrace": None,
            }
        return {"Message": self.message}


def validate_instance_id(instance_id: str) -> None:
    if not instance_id or len(instance_id) > 256:
        raise ClientError(400, "Instance ID must be between 1 and 256 characters.")
    if instance_id.startswith("@"):
        raise ClientError(400, f"Instance ID '{instance_id}' must not start with '@'.")
    if _BAD_ID.search(instance_id):
        raise ClientError(
            400, f"Instance ID '{instance_id}' must not contain /, \\, #, ? or control characters."
        )


def parse_json_text(body: bytes, what: str = "request body") -> str | None:
    """Request body -> JSON text stored verbatim (None for an empty body)."""
    if not body.strip():
        return None
    try:
        text = body.decode("utf-8")
        json.loads(text)
    except ValueError as exc:
        raise ClientError(400, f"The {what} is not valid JSON: {exc}") from exc
    return text


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
            raise ClientError(
                400, f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function."
            )
        instance_id = instance_id or uuid.uuid4().hex
        validate_instance_id(instance_id)
        now = self.engine.now()
        version = version if version is not None else self.engine.config.default_version
        start = h.execution_started(
            at=now, name=info.name if name.lower() == info.name.lower() else name,
            instance_id=instance_id, execution_id="", input_json=input_json, version=version,
            scheduled_start=scheduled_start,
        )
        record = InstanceRecord(
            instance_id=instance_id, name=start["Name"], status="Pending", version=version,
            input_json=input_json, created_at=now, updated_at=now,
        )
        try:
            await self.store.create_instance(
                record, {"kind": "start", "event": start},
                self.engine.config.overridable_states, visible_at=scheduled_start,
            )
        except InstanceExistsError as exc:
            raise ClientError(409, str(exc), "System.InvalidOperationException") from exc
        if scheduled_start and scheduled_start > now:
            self.engine.wake_timers()
        else:
            self.engine.notify(instance_id)
        return instance_id

    async def require(self, instance_id: str) -> InstanceRecord:
        record = await self.store.get_instance(instance_id)
        if record is None or instance_id.startswith("@"):
            raise ClientError(404, f"No instance with ID '{instance_id}' found.")
        return record

    async def _control(self, instance_id: str, message: dict[str, Any]) -> None:
        record = await self.require(instance_id)
        if record.status in TERMINAL:
            raise ClientError(410, f"The instance '{instance_id}' is {record.status}.")
        await self.store.send(instance_id, message, self.engine.now())
        self.engine.notify(instance_id)

    async def raise_event(self, instance_id: str, name: str, input_json: str | None) -> None:
        event = h.event_raised(self.engine.now(), name, input_json)
        await self._control(instance_id, {"kind": "event", "event": event})

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        await self._control(instance_id, {"kind": "terminate", "reason": reason})

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        await self._control(instance_id, {"kind": "suspend", "reason": reason})

    async def resume(self, instance_id: str, reason: str | None) -> None:
        await self._control(instance_id, {"kind": "resume", "reason": reason})

    async def status(
        self, instance_id: str, *, show_input: bool = True, show_history: bool = False,
        show_history_output: bool = False,
    ) -> dict[str, Any] | None:
        record = await self.store.get_instance(instance_id)
        if record is None:
            return None
        payload = status_payload(record, show_input)
        if show_history:
            events = await self.store.get_history(instance_id)
            payload["historyEvents"] = transform_history(events, show_history_output)
        return payload

    async def query(self, query: Query) -> tuple[list[dict[str, Any]], str | None]:
        page = await self.store.query(query)
        return [status_payload(r, True) for r in page.records], page.continuation

    async def purge(self, instance_id: str) -> int:
        record = await self.store.get_instance(instance_id)
        if record is None:
            return 0
        if record.status not in TERMINAL and not instance_id.startswith("@"):
            raise ClientError(412, f"The instance '{instance_id}' is {record.status}; only finished instances can be purged.")
        return await self.store.purge(instance_id)

    # --- entities ---

    async def signal_entity(
        self, name: str, key: str, operation: str, input_json: str | None
    ) -> str:
        if self.engine.index.entity(name) is None:
            raise ClientError(404, f"No entity function named '{name}' is defined by this app.")
        if not key or _BAD_ID.search(key) or not operation:
            raise ClientError(400, "The entity key and operation must be non-empty and contain no /, \\, #, ? or control characters.")
        request_id = str(uuid.uuid4())
        request = {"op": operation, "id": request_id, "signal": True, "input": input_json}
        target = wire.entity_instance_id(name, key)
        await self.store.send(target, {"kind": "op", "request": request}, self.engine.now())
        self.engine.notify(target)
        return request_id

    async def read_entity(self, name: str, key: str) -> InstanceRecord | None:
        record = await self.store.get_instance(wire.entity_instance_id(name, key))
        return record if record is not None and record.entity_exists else None


def _api_time(stamp: str) -> str:
    return stamp[:19] + "Z" if stamp else stamp


def status_payload(record: InstanceRecord, show_input: bool) -> dict[str, Any]:
    output = record.output_json
    return {
        "name": record.name,
        "instanceId": record.instance_id,
        "runtimeStatus": record.status,
        "input": wire.parse_stored(record.input_json) if show_input else None,
        "customStatus": wire.parse_stored(record.custom_status_json),
        "output": wire.parse_stored(output),
        "createdTime": _api_time(record.created_at),
        "lastUpdatedTime": _api_time(record.updated_at),
    }


def transform_history(events: list[dict[str, Any]], with_output: bool) -> list[dict[str, Any]]:
    """The extension's history view: names instead of numbers, scheduling merged in."""
    scheduled = {
        e["EventId"]: e
        for e in events
        if e["EventType"] in (h.EventType.TASK_SCHEDULED, h.EventType.SUB_ORCHESTRATION_CREATED)
    }
    skip = {
        h.EventType.ORCHESTRATOR_STARTED, h.EventType.ORCHESTRATOR_COMPLETED,
        h.EventType.TASK_SCHEDULED, h.EventType.SUB_ORCHESTRATION_CREATED,
    }
    view: list[dict[str, Any]] = []
    for event in events:
        kind = h.EventType(event["EventType"])
        if kind in skip:
            continue
        row: dict[str, Any] = {"EventType": _pascal(kind.name), "Timestamp": event["Timestamp"]}
        if kind == h.EventType.EXECUTION_STARTED:
            row["FunctionName"] = event.get("Name")
            row["ScheduledStartTime"] = event.get("ScheduledStartTime")
        elif "TaskScheduledId" in event:
            origin = scheduled.get(event["TaskScheduledId"], {})
            row["FunctionName"] = origin.get("Name")
            row["ScheduledTime"] = origin.get("Timestamp")
            for key in ("Reason", "Details"):
                if event.get(key) is not None:
                    row[key] = event[key]
            if with_output and "Result" in event:
                row["Result"] = wire.parse_stored(event["Result"])
        elif kind == h.EventType.EXECUTION_COMPLETED:
            row["OrchestrationStatus"] = event.get("OrchestrationStatus")
            if with_output:
                row["Result"] = wire.parse_stored(event.get("Result"))
        else:
            for key in ("Name", "FireAt", "Reason"):
                if event.get(key) is not None:
                    row[key] = event[key]
        view.append(row)
    return view


def _pascal(name: str) -> str:
    fixed = {"SUB_ORCHESTRATION_COMPLETED": "SubOrchestrationInstanceCompleted",
             "SUB_ORCHESTRATION_FAILED": "SubOrchestrationInstanceFailed"}
    return fixed.get(name) or "".join(p.capitalize() for p in name.split("_"))
