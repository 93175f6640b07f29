"""A small app for ``replay-check``: the tests copy it and change it the way a deploy would.

``flow`` calls ``first`` then ``second``, then waits for the event ``go``; ``steady`` waits
for ``go`` and never changes. The tests swap the two calls (a reordering), or rename ``flow``
(a removed orchestrator), in copies of this file.
"""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.orchestration_trigger(context_name="context")
def flow(context: df.DurableOrchestrationContext):
    a = yield context.call_activity("first", 1)
    b = yield context.call_activity("second", 2)
    context.set_custom_status("waiting")
    yield context.wait_for_external_event("go")
    return [a, b]


@app.orchestration_trigger(context_name="context")
def steady(context: df.DurableOrchestrationContext):
    context.set_custom_status("waiting")
    value = yield context.wait_for_external_event("go")
    return value


@app.activity_trigger(input_name="value")
def first(value: int) -> int:
    return value * 10


@app.activity_trigger(input_name="value")
def second(value: int) -> int:
    return value * 100
