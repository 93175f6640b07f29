"""Version 1.0 of a small app for the host's version tests (``versioned_v2`` is its next deploy).

``order`` marks its path, waits for the event ``go``, then starts ``report`` twice: once
without a version (the child gets the serving host's ``defaultVersion``) and once pinned to
the order's own version. ``countdown`` continues as new until its input ``left`` reaches 0 and
returns the version it ended with. ``POST /api/start/{name}?version=`` starts an orchestrator
through the SDK's durable client (``start_new(..., version=)``).
"""

import json
import logging

import azure.durable_functions as df
import azure.functions as func

APP_VERSION = "1.0"  # this deployment's defaultVersion, for the logs
log = logging.getLogger("versioned_app")

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="start/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client) -> func.HttpResponse:
    body = req.get_body()
    instance_id = await client.start_new(
        req.route_params["name"],
        client_input=json.loads(body) if body else None,
        version=req.params.get("version"),
    )
    return func.HttpResponse(json.dumps({"id": instance_id}), mimetype="application/json")


@app.orchestration_trigger(context_name="context")
def order(context: df.DurableOrchestrationContext):
    ran(context, "start")
    path = yield context.call_activity("mark", "v1-path")
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
