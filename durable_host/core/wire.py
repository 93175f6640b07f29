"""The Durable Functions out-of-process JSON contract, and nothing else. Pure.

Every shape that crosses between this host and the azure-functions-durable SDK is
encoded or decoded here, so the SDK's quirks live in one module:

* orchestrator request  ``{"history", "input", "instanceId", "isReplaying", ...}``
* orchestrator response ``{"isDone", "actions": [[...]], "output", "error", "customStatus"}``
  or an exception whose text carries the state after ``$OutOfProcData$:``
* entity batch request  ``{"self", "exists", "state", "batch"}`` (exactly these keys)
* entity batch response ``{"entityExists", "entityState", "results", "signals"}``

Quirks pinned by tests: the orchestrator ``input`` is the *parsed* ExecutionStarted
input (so Python-started instances see JSON text); entity operation inputs are JSON
inside JSON; raised-event payloads reach the orchestrator as JSON text.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

OUT_OF_PROC_LABEL = "\n\n$OutOfProcData$:"
# What Azure Storage's provider sends; they make the SDK split long timers (schema V3).
LONG_TIMER_INTERVAL = "3.00:00:00"
MAX_SHORT_TIMER = "6.00:00:00"


class ActionType(enum.IntEnum):
    CALL_ACTIVITY = 0
    CALL_ACTIVITY_WITH_RETRY = 1
    CALL_SUB_ORCHESTRATOR = 2
    CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
    CONTINUE_AS_NEW = 4
    CREATE_TIMER = 5
    WAIT_FOR_EXTERNAL_EVENT = 6
    CALL_ENTITY = 7
    CALL_HTTP = 8
    SIGNAL_ENTITY = 9
    SCHEDULED_SIGNAL_ENTITY = 10
    WHEN_ANY = 11
    WHEN_ALL = 12


@dataclass(frozen=True, slots=True)
class OrchestratorState:
    """What one SDK invocation decided (decoded from its JSON or its exception)."""

    is_done: bool
    actions: list[dict[str, Any]]
    output: Any = None
    has_output: bool = False
    error: str | None = None
    custom_status: Any = None
    has_custom_status: bool = False
    raw_failure: str | None = None  # an exception without state: fail at once


def encode_orchestration_request(
    instance_id: str,
    history: list[dict[str, Any]],
    input_json: str | None,
    parent_instance_id: str | None,
) -> str:
    return json.dumps(orchestration_request(instance_id, history, input_json, parent_instance_id))


_EMPTY_HISTORY = len('{"history": [], ')


def encode_orchestration_request_text(
    instance_id: str,
    history_text: str,
    input_json: str | None,
    parent_instance_id: str | None,
) -> str:
    """``encode_orchestration_request`` with the history given as the JSON text of its
    items: the same bytes, since ``history`` is the first key."""
    rest = json.dumps(orchestration_request(instance_id, [], input_json, parent_instance_id))
    return '{"history": [' + history_text + "], " + rest[_EMPTY_HISTORY:]


def orchestration_request(
    instance_id: str,
    history: list[dict[str, Any]],
    input_json: str | None,
    parent_instance_id: str | None,
) -> dict[str, Any]:
    """The orchestrator context the extension sends (protocol §1.2), before encoding."""
    # The extension parses ExecutionStarted.Input before sending it as "input".
    parsed = json.loads(input_json) if input_json is not None else None
    return {
        "history": history,
        "input": parsed,
        "instanceId": instance_id,
        "isReplaying": False,
        "parentInstanceId": parent_instance_id,
        "upperSchemaVersion": 1,
        "upperSchemaVersionNew": 2,
        "longRunningTimerIntervalDuration": LONG_TIMER_INTERVAL,
        "maximumShortTimerDuration": MAX_SHORT_TIMER,
        "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
    }


def decode_orchestrator_state(raw: str) -> OrchestratorState:
    data = json.loads(raw)
    actions = data.get("actions") or [[]]
    flat: list[dict[str, Any]] = []
    # V2/V3 send one inner list; tolerate V1's list-of-lists by concatenating.
    for group in actions:
        flat.extend(group)
    return OrchestratorState(
        is_done=bool(data.get("isDone")),
        actions=flat,
        output=data.get("output"),
        has_output="output" in data,
        error=data.get("error"),
        custom_status=data.get("customStatus"),
        has_custom_status="customStatus" in data,
    )


def decode_orchestrator_exception(message: str) -> OrchestratorState:
    """Split the SDK's ``<error>\\n\\n$OutOfProcData$:<state>`` failure text."""
    if OUT_OF_PROC_LABEL not in message:
        return OrchestratorState(is_done=True, actions=[], raw_failure=message)
    _, _, tail = message.partition(OUT_OF_PROC_LABEL)
    state = decode_orchestrator_state(tail.split("\nStack:", 1)[0])
    error = state.error or message.partition(OUT_OF_PROC_LABEL)[0]
    return OrchestratorState(
        is_done=state.is_done,
        actions=state.actions,
        error=error,
        custom_status=state.custom_status,
        has_custom_status=state.has_custom_status,
    )


def encode_json_text(value: Any) -> str:
    """Compact JSON text, as the extension re-serializes values it stores."""
    return json.dumps(value, separators=(",", ":"))


def parse_stored(text: str | None) -> Any:
    """Stored JSON text -> value, as the status API shows it (invalid JSON stays raw)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- entities ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityOperation:
    request_id: str
    name: str
    input_json: str | None  # JSON text of the operation input (None: no input)
    is_signal: bool
    parent: str | None = None
    parent_execution: str | None = None


@dataclass(frozen=True, slots=True)
class EntityBatchResult:
    exists: bool
    state_json: str | None
    results: list[dict[str, Any]] = field(default_factory=list)


def encode_entity_batch(
    name: str, key: str, exists: bool, state_json: str | None, ops: list[EntityOperation]
) -> str:
    batch = [
        {
            # Quirk: the SDK json.loads the input and then df_loads it: JSON inside JSON.
            "name": op.name,
            "input": json.dumps(op.input_json) if op.input_json is not None else None,
            "isSignal": op.is_signal,
        }
        for op in ops
    ]
    return json.dumps(
        {"self": {"name": name, "key": key}, "exists": exists, "state": state_json, "batch": batch}
    )


def decode_entity_batch(raw: str) -> EntityBatchResult:
    data = json.loads(raw)
    return EntityBatchResult(
        exists=bool(data.get("entityExists")),
        state_json=data.get("entityState"),
        results=list(data.get("results") or []),
    )


def entity_response(result: dict[str, Any]) -> str:
    """ResponseMessage JSON for a caller (``exceptionType`` marks a failed operation)."""
    message: dict[str, Any] = {"result": result.get("result")}
    if result.get("isError"):
        message["exceptionType"] = "Error"
    return json.dumps(message)


def entity_instance_id(name: str, key: str) -> str:
    return f"@{name.lower()}@{key}"


def split_entity_id(instance_id: str) -> tuple[str, str]:
    name, _, key = instance_id[1:].partition("@")
    return name, key
