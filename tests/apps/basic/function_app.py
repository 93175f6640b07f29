"""Test app for the durable host: one small function per behaviour under test."""

import json
import os
from datetime import timedelta
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
MARKS = Path(os.environ.get("BASIC_APP_MARKS", "/nonexistent"))


def _mark(name: str) -> None:
    """Append a line to a marks file so tests can count real executions across restarts."""
    if MARKS.parent.is_dir():
        with MARKS.open("a") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())


# --- activities ---


@app.activity_trigger(input_name="name")
def say_hello(name: str) -> str:
    _mark(f"say_hello:{name}")
    return f"Hello {name}!"


@app.activity_trigger(input_name="value")
def echo(value):
    return value


@app.activity_trigger(input_name="n")
def double(n: int) -> int:
    return n * 2


@app.activity_trigger(input_name="message")
def fail(message: str) -> str:
    raise ValueError(message)


@app.activity_trigger(input_name="key")
def flaky(key: str) -> str:
    """Fails the first two times it runs for a key (counted in the marks file)."""
    _mark(f"flaky:{key}")
    runs = MARKS.read_text().splitlines().count(f"flaky:{key}") if MARKS.exists() else 0
    if runs <= 2:
        raise RuntimeError(f"flaky failure {runs}")
    return f"ok after {runs}"


@app.activity_trigger(input_name="seconds")
def slow(seconds: float) -> float:
    import time

    _mark(f"slow:start:{seconds}")
    time.sleep(seconds)
    _mark(f"slow:end:{seconds}")
    return seconds


@app.activity_trigger(input_name="payload")
@app.durable_client_input(client_name="client")
async def raise_from_activity(payload: dict, client) -> str:
    await client.raise_event(payload["instance"], payload["event"], payload["data"])
    return "raised"


# --- orchestrators ---


@app.orchestration_trigger(context_name="context")
def hello_sequence(context: df.DurableOrchestrationContext):
    result = []
    for city in ("Tokyo", "Seattle", "London"):
        result.append((yield context.call_activity("say_hello", city)))
    return result


@app.orchestration_trigger(context_name="context")
def chain(context: df.DurableOrchestrationContext):
    steps = int((context.get_input() or {}).get("steps", 10))
    total = 0
    for i in range(steps):
        total += yield context.call_activity("double", i)
    return total


@app.orchestration_trigger(context_name="context")
def fan_out(context: df.DurableOrchestrationContext):
    count = int(context.get_input()["count"])
    results = yield context.task_all([context.call_activity("double", i) for i in range(count)])
    return sum(results)


@app.orchestration_trigger(context_name="context")
def with_retry(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=100, max_number_of_attempts=3)
    return (yield context.call_activity_with_retry("flaky", options, context.instance_id))


@app.orchestration_trigger(context_name="context")
def retry_exhausted(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=50, max_number_of_attempts=2)
    try:
        yield context.call_activity_with_retry("fail", options, "always")
    except Exception as exc:
        return f"caught: {str(exc)[:60]}"


@app.orchestration_trigger(context_name="context")
def catches_failure(context: df.DurableOrchestrationContext):
    try:
        yield context.call_activity("fail", "boom")
    except Exception as exc:
        return str(exc).split("\n")[0]


@app.orchestration_trigger(context_name="context")
def fails(context: df.DurableOrchestrationContext):
    yield context.call_activity("echo", 1)
    raise ValueError("orchestrator exploded")


@app.orchestration_trigger(context_name="context")
def approval(context: df.DurableOrchestrationContext):
    deadline = context.current_utc_datetime + timedelta(seconds=300)
    timer = context.create_timer(deadline)
    event = context.wait_for_external_event("approve")
    winner = yield context.task_any([event, timer])
    if winner == event:
        timer.cancel()
        return {"approved": event.result}
    return {"approved": None}


@app.orchestration_trigger(context_name="context")
def sleeper(context: df.DurableOrchestrationContext):
    seconds = float(context.get_input())
    yield context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    return (yield context.call_activity("say_hello", "after sleep"))


@app.orchestration_trigger(context_name="context")
def two_events(context: df.DurableOrchestrationContext):
    first = yield context.wait_for_external_event("a")
    second = yield context.wait_for_external_event("b")
    return [first, second]


@app.orchestration_trigger(context_name="context")
def same_event_twice(context: df.DurableOrchestrationContext):
    first = yield context.wait_for_external_event("go")
    second = yield context.wait_for_external_event("go")
    return [first, second]


@app.orchestration_trigger(context_name="context")
def parent(context: df.DurableOrchestrationContext):
    child_id = f"{context.instance_id}-child"
    a = yield context.call_sub_orchestrator("hello_sequence", None, child_id)
    b = yield context.call_sub_orchestrator("chain", {"steps": 3})
    return {"a": a, "b": b}


@app.orchestration_trigger(context_name="context")
def parent_of_failure(context: df.DurableOrchestrationContext):
    try:
        yield context.call_sub_orchestrator("fails", None, f"{context.instance_id}-child")
    except Exception as exc:
        return str(exc).split("\n")[0]


@app.orchestration_trigger(context_name="context")
def parent_of_waiter(context: df.DurableOrchestrationContext):
    try:
        yield context.call_sub_orchestrator("two_events", None, f"{context.instance_id}-child")
        return "child completed"
    except Exception as exc:
        return "child failed: " + str(exc).split("\n")[0]


@app.orchestration_trigger(context_name="context")
def counter_loop(context: df.DurableOrchestrationContext):
    n = int(context.get_input() or 0)
    if n >= 3:
        return n
    yield context.call_activity("echo", n)
    context.continue_as_new(n + 1)
    return None


@app.orchestration_trigger(context_name="context")
def eternal_with_events(context: df.DurableOrchestrationContext):
    seen = context.get_input() or []
    if len(seen) >= 3:
        return seen
    value = yield context.wait_for_external_event("item")
    context.continue_as_new(seen + [value])
    return None


@app.orchestration_trigger(context_name="context")
def custom_status(context: df.DurableOrchestrationContext):
    context.set_custom_status({"phase": "started"})
    yield context.call_activity("echo", 1)
    context.set_custom_status({"phase": "done"})
    return "ok"


@app.orchestration_trigger(context_name="context")
def huge_status(context: df.DurableOrchestrationContext):
    context.set_custom_status("x" * 20000)
    yield context.call_activity("echo", 1)
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def fail_fast_then_more(context: df.DurableOrchestrationContext):
    """task_all fails fast on 'fail'; strict scheduling holds 'echo' until 'slow' ends."""
    try:
        yield context.task_all(
            [context.call_activity("fail", "x"), context.call_activity("slow", 0.5)]
        )
    except Exception:
        pass
    return (yield context.call_activity("echo", "after"))


@app.orchestration_trigger(context_name="context")
def versioned(context: df.DurableOrchestrationContext):
    yield context.call_activity("echo", 1)
    return context.version


@app.orchestration_trigger(context_name="context")
def uuids(context: df.DurableOrchestrationContext):
    first = context.new_uuid()
    yield context.call_activity("echo", 1)
    second = context.new_uuid()
    return [first, second]


@app.orchestration_trigger(context_name="context")
def event_from_activity(context: df.DurableOrchestrationContext):
    payload = {"instance": context.instance_id, "event": "ping", "data": {"n": 1}}
    yield context.call_activity("raise_from_activity", payload)
    return (yield context.wait_for_external_event("ping"))


@app.orchestration_trigger(context_name="context")
def counter_caller(context: df.DurableOrchestrationContext):
    entity = df.EntityId("counter", context.get_input() or "c1")
    yield context.call_entity(entity, "add", 1)
    context.signal_entity(entity, "add", 10)
    return (yield context.call_entity(entity, "get"))


@app.orchestration_trigger(context_name="context")
def entity_error_caller(context: df.DurableOrchestrationContext):
    entity = df.EntityId("counter", "errors")
    try:
        yield context.call_entity(entity, "explode")
    except Exception as exc:
        return "caught: " + str(exc)
    return "no error"


@app.orchestration_trigger(context_name="context")
def http_caller(context: df.DurableOrchestrationContext):
    url = context.get_input()
    response = yield context.call_http("GET", url)
    return response["statusCode"]


@app.orchestration_trigger(context_name="context")
def slow_step(context: df.DurableOrchestrationContext):
    """One slow activity (marks slow:start/slow:end): graceful-stop tests."""
    return (yield context.call_activity("slow", float(context.get_input())))


# --- entities ---


@app.entity_trigger(context_name="context")
def counter(context: df.DurableEntityContext):
    value = context.get_state(lambda: 0)
    op = context.operation_name
    if op == "add":
        value += context.get_input()
    elif op == "reset":
        value = 0
    elif op == "explode":
        raise ValueError("counter exploded")
    elif op == "delete":
        context.destruct_on_exit()
        return
    context.set_state(value)
    context.set_result(value)


# --- HTTP ---


@app.route(route="orchestrators/{name}/{instance_id?}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start(req: func.HttpRequest, client) -> func.HttpResponse:
    body = req.get_body()
    instance_id = await client.start_new(
        req.route_params["name"],
        req.route_params.get("instance_id"),
        req.get_json() if body else None,
    )
    return client.create_check_status_response(req, instance_id)


@app.route(route="wait/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start_wait(req: func.HttpRequest, client) -> func.HttpResponse:
    instance_id = await client.start_new(req.route_params["name"], None, None)
    return await client.wait_for_completion_or_create_check_status_response(
        req, instance_id, 10000, 100
    )


@app.route(route="status/{instance_id}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def http_status(req: func.HttpRequest, client) -> func.HttpResponse:
    status = await client.get_status(req.route_params["instance_id"])
    if not status:
        return func.HttpResponse(
            json.dumps({"found": False}), status_code=404, mimetype="application/json"
        )
    return func.HttpResponse(
        json.dumps({"status": status.runtime_status.value, "output": status.output}),
        mimetype="application/json",
    )


@app.route(route="events/{instance_id}/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_raise(req: func.HttpRequest, client) -> func.HttpResponse:
    await client.raise_event(
        req.route_params["instance_id"], req.route_params["name"], req.get_json()
    )
    return func.HttpResponse(status_code=202)


@app.route(route="terminate/{instance_id}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_terminate(req: func.HttpRequest, client) -> func.HttpResponse:
    await client.terminate(req.route_params["instance_id"], "by test")
    return func.HttpResponse(status_code=202)


@app.route(route="entities/{name}/{key}", methods=["POST", "GET"])
@app.durable_client_input(client_name="client")
async def http_entity(req: func.HttpRequest, client) -> func.HttpResponse:
    entity = df.EntityId(req.route_params["name"], req.route_params["key"])
    if req.method == "POST":
        await client.signal_entity(entity, req.params.get("op", "add"), req.get_json())
        return func.HttpResponse(status_code=202)
    state = await client.read_entity_state(entity)
    return func.HttpResponse(
        json.dumps({"exists": state.entity_exists, "state": state.entity_state}),
        mimetype="application/json",
    )


@app.route(route="hello/{name:alpha}", methods=["GET"])
def hello_sync(req: func.HttpRequest) -> str:
    return f"hi {req.route_params['name']} {req.params.get('x', '')}".strip()


@app.route(route="echo", methods=["POST", "PUT"])
async def echo_http(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(
        req.get_body(),
        status_code=201,
        headers={"X-Method": req.method},
        mimetype="application/octet-stream",
    )
