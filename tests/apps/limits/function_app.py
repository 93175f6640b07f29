"""Test app for declared limits: the kernel's ``limiter`` entity and ``orchestrators.limits``.

``limited`` runs the activity ``work`` under the declaration in its input; ``work`` appends
``start n`` and ``end n`` to ``LIMITS_APP_MARKS`` around a short pause, so overlapping runs
show in the file. ``grab`` takes a slot and never releases it: a holder that died mid-run.
"""

import os
import time

import azure.durable_functions as df
import azure.functions as func

from activities import hand_over
from entities import limiter
from kernel.common import limits as kernel_limits
from orchestrators import limits

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
app.register_functions(limiter.bp)
app.register_functions(hand_over.bp)


def _mark(line: str) -> None:
    with open(os.environ["LIMITS_APP_MARKS"], "a") as marks:
        marks.write(line + "\n")


@app.activity_trigger(input_name="n")
def work(n: int) -> int:
    _mark(f"start {n}")
    time.sleep(0.05)
    _mark(f"end {n}")
    return n


@app.orchestration_trigger(context_name="context")
def limited(context: df.DurableOrchestrationContext):
    job = context.get_input()
    limit = kernel_limits.parse_limit(job["concurrency"])

    def step():
        return (yield context.call_activity("work", job["n"]))

    return (yield from limits.limited(context, limit, job, context.instance_id, step))


@app.orchestration_trigger(context_name="context")
def grab(context: df.DurableOrchestrationContext):
    job = context.get_input()
    limit = kernel_limits.parse_limit(job["concurrency"])
    key = kernel_limits.render_key(limit, job)
    return (yield from limits.acquire(context, limit, key, context.instance_id))
