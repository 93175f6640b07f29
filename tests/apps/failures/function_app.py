"""Test app for per-kind failure handlers (``kernel/turn/failures.py``, ``orchestrators/failures.py``).

``task`` runs the kind ``charge`` under a policy of three tries with the handler ``refund``.
``charge`` fails its first ``fail_times`` tries (counted per ``id`` in ``FAILURES_APP_MARKS``);
``refund`` records the input it was given, and fails itself when asked to.
"""

import json
import os

import azure.durable_functions as df
import azure.functions as func

from kernel.turn.failures import FailurePolicy
from orchestrators.failures import run_kind

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
POLICY = FailurePolicy(kind="charge", max_attempts=3, first_retry_s=0.1, on_failure="refund")


def _marks() -> list[dict]:
    path = os.environ["FAILURES_APP_MARKS"]
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def _mark(entry: dict) -> None:
    with open(os.environ["FAILURES_APP_MARKS"], "a") as f:
        f.write(json.dumps(entry) + "\n")


@app.activity_trigger(input_name="job")
def charge(job: dict) -> str:
    tries = 1 + sum(1 for m in _marks() if m.get("try") == job["id"])
    _mark({"try": job["id"], "n": tries})
    if tries <= job["fail_times"]:
        raise RuntimeError(f"card declined ({job['id']} try {tries})")
    return f"charged {job['id']}"


@app.orchestration_trigger(context_name="context")
def refund(context: df.DurableOrchestrationContext):
    given = context.get_input()
    if not context.is_replaying:
        _mark({"handled": given["input"]["id"], "given": given, "version": context.version})
    if given["input"].get("handler_fails"):
        raise RuntimeError("the refund service is down")
    return "refunded"


@app.orchestration_trigger(context_name="context")
def task(context: df.DurableOrchestrationContext):
    return (yield from run_kind(context, POLICY, context.instance_id, context.get_input()))
