"""An app whose instances are caught mid-flight by a hub transfer (``tests/store/test_transfer``).

Every activity appends one line to ``TRANSFER_APP_MARKS`` when it completes, so a test can
count each effect: ``waiter`` waits for ``go``; ``parent`` waits on a child ``waiter``;
``napper`` waits on a durable timer, then runs ``tick``; ``entity_user`` gives the entity
``counter`` state, then waits for ``go`` before reading it back; ``sleepy`` runs ``slow``,
which takes long enough for a host stopped meanwhile to leave it scheduled but not run.
"""

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
MARKS = Path(os.environ.get("TRANSFER_APP_MARKS", "/nonexistent"))


def _mark(line: str) -> None:
    if MARKS.parent.is_dir():
        with MARKS.open("a") as f:
            f.write(line + "\n")


@app.orchestration_trigger(context_name="context")
def waiter(context: df.DurableOrchestrationContext):
    marked = yield context.call_activity("note", context.instance_id)
    context.set_custom_status("waiting")
    value = yield context.wait_for_external_event("go")
    return [marked, value]


@app.orchestration_trigger(context_name="context")
def parent(context: df.DurableOrchestrationContext):
    child = yield context.call_sub_orchestrator("waiter", None, f"{context.instance_id}:child")
    return {"child": child}


@app.orchestration_trigger(context_name="context")
def napper(context: df.DurableOrchestrationContext):
    seconds = context.get_input()["seconds"]
    due = context.current_utc_datetime + timedelta(seconds=seconds)
    context.set_custom_status({"due": due.isoformat()})
    yield context.create_timer(due)
    ran_at = yield context.call_activity("tick", context.instance_id)
    return {"due": due.isoformat(), "ran_at": ran_at}


@app.orchestration_trigger(context_name="context")
def entity_user(context: df.DurableOrchestrationContext):
    entity = df.EntityId("counter", context.instance_id)
    yield context.call_entity(entity, "add", 5)
    context.set_custom_status("waiting")
    more = yield context.wait_for_external_event("go")
    yield context.call_entity(entity, "add", more)
    return (yield context.call_entity(entity, "get"))


@app.orchestration_trigger(context_name="context")
def sleepy(context: df.DurableOrchestrationContext):
    return (yield context.call_activity("slow", context.instance_id))


@app.entity_trigger(context_name="context")
def counter(context: df.DurableEntityContext):
    value = context.get_state(lambda: 0)
    if context.operation_name == "add":
        value += context.get_input()
        context.set_state(value)
    context.set_result(value)


@app.activity_trigger(input_name="key")
def note(key: str) -> str:
    _mark(f"note:{key}")
    return f"noted {key}"


@app.activity_trigger(input_name="key")
def tick(key: str) -> str:
    _mark(f"tick:{key}")
    return datetime.now(UTC).isoformat()


@app.activity_trigger(input_name="key")
def slow(key: str) -> str:
    _mark(f"slow-began:{key}")
    time.sleep(float(os.environ.get("TRANSFER_APP_SLOW_SECONDS", "6")))
    _mark(f"slow:{key}")
    return f"slept {key}"
