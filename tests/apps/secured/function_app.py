"""A small app for the host's auth tests: one route per auth level, and durable client
routes and an activity that drive the SDK's client (its RPC calls) with auth on."""

import json

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)


@app.route(route="open", auth_level=func.AuthLevel.ANONYMOUS)
def open_route(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps({"route": "open", "url": req.url}), mimetype="application/json"
    )


@app.route(route="guarded")
def guarded(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"route": "guarded"}), mimetype="application/json")


@app.route(route="other")
def other(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"route": "other"}), mimetype="application/json")


@app.route(route="admin-only", auth_level=func.AuthLevel.ADMIN)
def admin_only(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"route": "admin-only"}), mimetype="application/json")


@app.route(route="start/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client) -> func.HttpResponse:
    body = req.get_body()
    instance_id = await client.start_new(
        req.route_params["name"], None, req.get_json() if body else None
    )
    return client.create_check_status_response(req, instance_id)


@app.route(route="manage/{instance_id}/{action}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def manage(req: func.HttpRequest, client) -> func.HttpResponse:
    """Every SDK client call the tests need, through the RPC base."""
    instance_id, action = req.route_params["instance_id"], req.route_params["action"]
    result: object = None
    if action == "status":
        status = await client.get_status(instance_id)
        result = status.runtime_status.value if status else None
    elif action == "raise":
        await client.raise_event(instance_id, "go", {"from": "client"})
    elif action == "terminate":
        await client.terminate(instance_id, "by test")
    elif action == "purge":
        result = (await client.purge_instance_history(instance_id)).instances_deleted
    elif action == "signal":
        await client.signal_entity(df.EntityId("tally", instance_id), "add", 2)
    elif action == "entity":
        state = await client.read_entity_state(df.EntityId("tally", instance_id))
        result = state.entity_state if state.entity_exists else None
    return func.HttpResponse(json.dumps({"result": result}), mimetype="application/json")


@app.orchestration_trigger(context_name="context")
def waiter(context: df.DurableOrchestrationContext):
    first = yield context.call_activity("raise_from_activity", context.instance_id)
    event = yield context.wait_for_external_event("go")
    return {"activity": first, "event": event}


@app.orchestration_trigger(context_name="context")
def parked(context: df.DurableOrchestrationContext):
    yield context.wait_for_external_event("never")
    return "done"


@app.activity_trigger(input_name="instance")
@app.durable_client_input(client_name="client")
async def raise_from_activity(instance: str, client) -> str:
    status = await client.get_status(instance)
    return f"seen {status.runtime_status.value}"


@app.entity_trigger(context_name="context")
def tally(context: df.DurableEntityContext):
    context.set_state((context.get_state(lambda: 0) or 0) + context.get_input())
