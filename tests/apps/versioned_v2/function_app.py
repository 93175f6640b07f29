"""Version 2.0 of the ``versioned_v1`` app: ``order`` stamps the order before it waits.

The stamp is an extra activity before the wait: not replay-safe for an instance of 1.0, so
the new path is taken only by instances of 2.0 and later (``context.version``), and an
instance of 1.0 keeps the actions it was started with.
"""

import logging

import azure.durable_functions as df

APP_VERSION = "2.0"  # this deployment's defaultVersion, for the logs
log = logging.getLogger("versioned_app")

app = df.DFApp()
OLD_VERSIONS = ("", "1.0")  # the versions before the stamp existed


@app.orchestration_trigger(context_name="context")
def order(context: df.DurableOrchestrationContext):
    ran(context, "start")
    if context.version in OLD_VERSIONS:
        path = yield context.call_activity("mark", "v1-path")
    else:
        path = yield context.call_activity("mark", "v2-path")
        yield context.call_activity("stamp", context.instance_id)
    context.set_custom_status({"phase": "waiting"})
    yield context.wait_for_external_event("go")
    ran(context, "go")
    child = yield context.call_sub_orchestrator("report", None, f"{context.instance_id}:report")
    pinned = yield context.call_sub_orchestrator(
        "report", None, f"{context.instance_id}:pinned", version=context.version
    )
    return {"version": context.version, "path": path, "child": child, "pinned": pinned}


def ran(context: df.DurableOrchestrationContext, step: str) -> None:
    """Which deployment ran the step: one log line, not repeated when an episode replays."""
    if not context.is_replaying:
        log.info("order step %s of version %s ran on %s", step, context.version, APP_VERSION)


@app.orchestration_trigger(context_name="context")
def report(context: df.DurableOrchestrationContext):
    return context.version


@app.orchestration_trigger(context_name="context")
def countdown(context: df.DurableOrchestrationContext):
    left = (context.get_input() or {}).get("left", 0)
    if left > 0:
        context.continue_as_new({"left": left - 1})
        return None
    return context.version


@app.activity_trigger(input_name="label")
def mark(label: str) -> str:
    return label


@app.activity_trigger(input_name="order")
def stamp(order: str) -> str:
    return f"stamped {order}"
