"""The workloads measured by the benchmarks in bench/."""

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="n")
def noop(n: int) -> int:
    return n


@app.orchestration_trigger(context_name="context")
def chain(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    steps = int(context.get_input()["steps"])
    for i in range(steps):
        yield context.call_activity("noop", i)
    return steps


@app.orchestration_trigger(context_name="context")
def fan_out(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    count = int(context.get_input()["count"])
    results = yield context.task_all([context.call_activity("noop", i) for i in range(count)])
    return len(results)


@app.orchestration_trigger(context_name="context")
def entity_calls(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    spec = context.get_input()
    entity = df.EntityId("counter", spec["key"])
    for _ in range(int(spec["calls"])):
        yield context.call_entity(entity, "add", 1)
    return spec["calls"]


@app.orchestration_trigger(context_name="context")
def sleeper(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Sleeps on one durable timer for ``seconds``."""
    seconds = float(context.get_input()["seconds"])
    yield context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    return "woke"


@app.entity_trigger(context_name="context")
def counter(context: df.DurableEntityContext) -> None:
    value = context.get_state(lambda: 0) + (context.get_input() or 0)
    context.set_state(value)
    context.set_result(value)


@app.orchestration_trigger(context_name="context")
def waiter(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Waits for the external event ``go`` and returns its payload."""
    payload = yield context.wait_for_external_event("go")
    return payload
