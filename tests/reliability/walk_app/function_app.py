"""The crash campaigns' test app: one small orchestration per durable feature, and one activity
whose every run is written to an append-only ledger outside the host.

``effect {key, value}`` appends ``key`` to the file named by ``RELIABILITY_LEDGER`` (fsync
before it returns) and returns ``value * 10``: the ledger is the oracle for "at-least-once,
and again only where the host died between a run and its completion". Orchestrations:

=============  =========================================================================
``w_start``    returns its input (start and completion only)
``w_steps``    ``effect`` for steps 1..n in order, returns their results
``w_timer``    a durable timer of ``seconds``, then ``effect``
``w_event``    waits for the event ``go``, then ``effect`` of its payload
``w_entity``   ``add`` 5 and 7 to its own ``counter`` entity, returns the counter
``w_parent``   ``w_child`` (an ``effect``) as a sub-orchestration, returns its result + 1
``w_can``      ``effect`` per generation, continue-as-new until generation ``last``
``w_fan``      ``effect`` ``n`` times at once (fan-out), returns the sum of the results
=============  =========================================================================

With ``RELIABILITY_WITH_KERNEL=1`` the same host also serves the agent kernel (the repository's
``function_app.py``: sessions API, turns, the notices workflow), for the mixed load of the
random-kill campaign; its functions are added to the kernel's app object.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func


def _app() -> df.DFApp:
    if os.environ.get("RELIABILITY_WITH_KERNEL", "") in ("", "0"):
        return df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
    root = Path(__file__).resolve().parents[3] / "function_app.py"
    spec = importlib.util.spec_from_file_location("kernel_function_app", root)
    assert spec is not None and spec.loader is not None
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    return kernel.app


app = _app()


@app.activity_trigger(input_name="job")
def effect(job: dict[str, Any]) -> int:
    with open(os.environ["RELIABILITY_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"{job['key']}\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    return int(job["value"]) * 10


@app.entity_trigger(context_name="context")
def counter(context: df.DurableEntityContext) -> None:
    value = context.get_state(lambda: 0)
    if context.operation_name == "add":
        value += int(context.get_input())
        context.set_state(value)
    context.set_result(value)


@app.orchestration_trigger(context_name="context")
def w_start(context: df.DurableOrchestrationContext):
    return {"echo": context.get_input()}
    yield  # a generator, as every orchestrator


@app.orchestration_trigger(context_name="context")
def w_steps(context: df.DurableOrchestrationContext):
    results = []
    for step in range(1, int(context.get_input()["n"]) + 1):
        key = f"{context.instance_id}:{step}"
        results.append((yield context.call_activity("effect", {"key": key, "value": step})))
    return results


@app.orchestration_trigger(context_name="context")
def w_timer(context: df.DurableOrchestrationContext):
    seconds = float(context.get_input()["seconds"])
    yield context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    return (yield context.call_activity("effect", {"key": context.instance_id, "value": 1}))


@app.orchestration_trigger(context_name="context")
def w_event(context: df.DurableOrchestrationContext):
    payload = yield context.wait_for_external_event("go")
    value = payload["value"] if isinstance(payload, dict) else int(payload)
    return (yield context.call_activity("effect", {"key": context.instance_id, "value": value}))


@app.orchestration_trigger(context_name="context")
def w_entity(context: df.DurableOrchestrationContext):
    entity = df.EntityId("counter", context.instance_id)
    yield context.call_entity(entity, "add", 5)
    yield context.call_entity(entity, "add", 7)
    return (yield context.call_entity(entity, "get"))


@app.orchestration_trigger(context_name="context")
def w_child(context: df.DurableOrchestrationContext):
    return (yield context.call_activity("effect", {"key": context.instance_id, "value": 4}))


@app.orchestration_trigger(context_name="context")
def w_parent(context: df.DurableOrchestrationContext):
    child = f"{context.instance_id}:child"
    result = yield context.call_sub_orchestrator("w_child", {}, child)
    return result + 1


@app.orchestration_trigger(context_name="context")
def w_can(context: df.DurableOrchestrationContext):
    job = context.get_input()
    generation, last = int(job["generation"]), int(job["last"])
    key = f"{context.instance_id}:gen{generation}"
    yield context.call_activity("effect", {"key": key, "value": generation})
    if generation < last:
        context.continue_as_new({"generation": generation + 1, "last": last})
        return None
    return generation


@app.orchestration_trigger(context_name="context")
def w_fan(context: df.DurableOrchestrationContext):
    n = int(context.get_input()["n"])
    jobs = [{"key": f"{context.instance_id}:f{i}", "value": i} for i in range(n)]
    results = yield context.task_all([context.call_activity("effect", job) for job in jobs])
    return sum(results)
