"""Test app for the host's start-up report: functions it serves and a trigger it does not run."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="greet/{name}", methods=["GET"])
def greet(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(f"hello {req.route_params['name']}")


@app.route(route="start", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client) -> func.HttpResponse:
    instance_id = await client.start_new("pair")
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def pair(context: df.DurableOrchestrationContext):
    first = yield context.call_activity("shout", "a")
    second = yield context.call_activity("shout", "b")
    return [first, second]


@app.activity_trigger(input_name="word")
def shout(word: str) -> str:
    return word.upper()


@app.event_hub_message_trigger(arg_name="message", event_hub_name="jobs", connection="EventHubs")
def drain(message) -> None:
    pass
