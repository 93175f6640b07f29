"""The reliability campaigns' app: every activity run leaves a line in an append-only ledger.

The ledger (``RELIABILITY_LEDGER``, one fsynced line per run: ``<pid> <what>``) lives outside
the task hub, so the tests judge the host by a witness it cannot rewrite: a step that ran
twice shows twice, a step that never ran is missing. ``RELIABILITY_GATE`` names a file
that holds ``gated_step`` while it exists (bounded), so a test can catch activities running.
"""

import os
import time
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
GATE_LIMIT_S = 30.0


def _ledger(line: str) -> None:
    path = os.environ.get("RELIABILITY_LEDGER")
    if not path:
        return
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {line}\n")
        f.flush()
        os.fsync(f.fileno())


@app.activity_trigger(input_name="step")
def ledger_step(step: dict) -> str:
    _ledger(f"run {step['key']}:{step['i']}")
    return f"{step['key']}:{step['i']}:{step['i'] * step['i']}"


@app.activity_trigger(input_name="step")
def gated_step(step: dict) -> str:
    _ledger(f"start {step['key']}:{step['i']}")
    gate = Path(os.environ.get("RELIABILITY_GATE", "/nonexistent"))
    deadline = time.monotonic() + GATE_LIMIT_S
    while gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"{step['key']}:{step['i']}"


@app.orchestration_trigger(context_name="context")
def ledger_chain(context: df.DurableOrchestrationContext):
    """``steps`` activities one after another, then one count on the ``tally`` entity."""
    job = context.get_input()
    results = []
    for i in range(int(job["steps"])):
        results.append((yield context.call_activity("ledger_step", {"key": job["key"], "i": i})))
    tally = df.EntityId("tally", job.get("tally", "all"))
    yield context.call_entity(tally, "add", 1)
    return results


@app.orchestration_trigger(context_name="context")
def gated_fan(context: df.DurableOrchestrationContext):
    job = context.get_input()
    tasks = [
        context.call_activity("gated_step", {"key": job["key"], "i": i})
        for i in range(int(job["count"]))
    ]
    return (yield context.task_all(tasks))


@app.entity_trigger(context_name="context")
def tally(context: df.DurableEntityContext):
    value = context.get_state(lambda: 0)
    if context.operation_name == "add":
        value += int(context.get_input())
        context.set_state(value)
    context.set_result(value)
