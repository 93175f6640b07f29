"""Test app of the identity suite: the app's content store in an activity, and a durable HTTP
call with a managed-identity token source."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="text")
def keep_text(text: str) -> str:
    """Through the app's own adapter, on whatever AzureWebJobsStorage says (here: identity)."""
    from adapters.content_store import default_store

    store = default_store()
    return store.get(store.put(text))


@app.orchestration_trigger(context_name="context")
def kept_after_event(context: df.DurableOrchestrationContext):
    text = yield context.wait_for_external_event("go")
    return (yield context.call_activity("keep_text", text))


@app.orchestration_trigger(context_name="context")
def token_call(context: df.DurableOrchestrationContext):
    args = context.get_input()
    source = df.ManagedIdentityTokenSource(args["resource"])
    try:
        response = yield context.call_http("GET", args["url"], token_source=source)
    except Exception as exc:  # noqa: BLE001 - the failure's text is what the test reads
        return {"failed": str(exc).split("\n")[0]}
    return {"status": response["statusCode"], "content": response["content"]}
