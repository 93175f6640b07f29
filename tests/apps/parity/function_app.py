"""Parity test app: the extension's behaviours, the SDK client's management calls, poison work.

host.json sets ``functionTimeout`` 2 s, ``maxConcurrentActivityFunctions`` 2 and
``overridableExistingInstanceStates`` AnyState, so each of those has something to pin.
``PARITY_MARKS`` names a file the activities append lines to (runs, starts and ends).
"""

import json
import logging
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
MARKS = Path(os.environ.get("PARITY_MARKS", "/nonexistent"))
log = logging.getLogger("parity")


def _mark(line: str) -> None:
    if MARKS.parent.is_dir():
        with MARKS.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def _runs(line: str) -> int:
    return MARKS.read_text().splitlines().count(line) if MARKS.exists() else 0


# --- activities ---


@app.activity_trigger(input_name="value")
def echo(value):
    return value


@app.activity_trigger(input_name="key")
def fails_until_third(key: str) -> str:
    """Fails on its first two runs for a key, succeeds from the third on."""
    _mark(f"run:{key}")
    runs = _runs(f"run:{key}")
    if runs <= 2:
        raise RuntimeError(f"failure {runs} of {key}")
    return f"{key} ok on run {runs}"


@app.activity_trigger(input_name="key")
def fails_once(key: str) -> str:
    _mark(f"once:{key}")
    if _runs(f"once:{key}") == 1:
        raise RuntimeError(f"first run of {key} fails")
    return f"{key} ok"


@app.activity_trigger(input_name="job")
def marked_sleep(job: dict) -> str:
    _mark(f"start:{job['tag']}")
    time.sleep(float(job["seconds"]))
    _mark(f"end:{job['tag']}")
    return job["tag"]


@app.activity_trigger(input_name="seconds")
def sleep_sync(seconds: float) -> str:
    time.sleep(seconds)
    _mark(f"sync slept {seconds}")
    return "woke"


@app.activity_trigger(input_name="seconds")
async def sleep_async(seconds: float) -> str:
    import asyncio

    await asyncio.sleep(seconds)
    _mark(f"async slept {seconds}")
    return "woke"


@app.activity_trigger(input_name="reason")
def kill_host(reason: str) -> str:
    """Crashes the whole interpreter, every time: poison."""
    _mark(f"kill_host:{reason}")
    os._exit(7)


# --- orchestrators ---


def _arg(context: df.DurableOrchestrationContext, name: str):
    """One field of a JSON-object input (raw webhook starts pass objects through as they are)."""
    value = context.get_input()
    if isinstance(value, str):  # started through the SDK client: JSON text (double-encoded)
        value = json.loads(value)
    return (value or {}).get(name)


@app.orchestration_trigger(context_name="context")
def hello(context: df.DurableOrchestrationContext):
    return (yield context.call_activity("echo", f"hello {_arg(context, 'who')}"))


@app.orchestration_trigger(context_name="context")
def waiter(context: df.DurableOrchestrationContext):
    return (yield context.wait_for_external_event("go"))


@app.orchestration_trigger(context_name="context")
def fails_then_recovers(context: df.DurableOrchestrationContext):
    first = yield context.call_activity("echo", "before")
    second = yield context.call_activity("fails_once", context.instance_id)
    return [first, second, (yield context.call_activity("echo", "after"))]


@app.orchestration_trigger(context_name="context")
def retry_then_more(context: df.DurableOrchestrationContext):
    options = df.RetryOptions(first_retry_interval_in_milliseconds=50, max_number_of_attempts=2)
    value = yield context.call_activity_with_retry(
        "fails_until_third", options, context.instance_id
    )
    return [value, (yield context.call_activity("echo", "after"))]


@app.orchestration_trigger(context_name="context")
def parent_of_failing(context: df.DurableOrchestrationContext):
    child = yield context.call_sub_orchestrator(
        "fails_then_recovers", None, f"{context.instance_id}-child"
    )
    return {"child": child}


@app.orchestration_trigger(context_name="context")
def kills_the_host(context: df.DurableOrchestrationContext):
    yield context.call_activity("echo", 1)
    os._exit(9)  # poison: the interpreter dies in every episode after the first step


@app.orchestration_trigger(context_name="context")
def activity_kills_the_host(context: df.DurableOrchestrationContext):
    try:
        yield context.call_activity("kill_host", context.instance_id)
    except Exception as exc:
        return "caught: " + str(exc).split("\n")[0]
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def replay_safe_logger(context: df.DurableOrchestrationContext):
    for step in range(3):
        if not context.is_replaying:
            log.info("parity-step %d of %s", step, context.instance_id)
        yield context.call_activity("echo", step)
    return "logged"


@app.orchestration_trigger(context_name="context")
def times_out(context: df.DurableOrchestrationContext):
    results = []
    for name in ("sleep_sync", "sleep_async"):
        try:
            results.append((yield context.call_activity(name, 3)))
        except Exception as exc:
            results.append(str(exc).split("\n")[0])
    return results


@app.orchestration_trigger(context_name="context")
def fan_out_marked(context: df.DurableOrchestrationContext):
    jobs = [{"tag": f"{context.instance_id}:{i}", "seconds": 0.3} for i in range(6)]
    return (yield context.task_all([context.call_activity("marked_sleep", job) for job in jobs]))


@app.orchestration_trigger(context_name="context")
def one_slow_step(context: df.DurableOrchestrationContext):
    seconds = float(_arg(context, "seconds"))
    return (
        yield context.call_activity(
            "marked_sleep", {"tag": context.instance_id, "seconds": seconds}
        )
    )


@app.orchestration_trigger(context_name="context")
def managed_identity_call(context: df.DurableOrchestrationContext):
    token = df.ManagedIdentityTokenSource("https://management.core.windows.net/.default")
    try:
        yield context.call_http("GET", "http://127.0.0.1:9/never", token_source=token)
    except Exception as exc:
        return str(exc).split("\n")[0]
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def plain_http_call(context: df.DurableOrchestrationContext):
    response = yield context.call_http("GET", _arg(context, "url"))
    return {"status": response["statusCode"], "has_headers": bool(response["headers"])}


@app.orchestration_trigger(context_name="context")
def timestamps(context: df.DurableOrchestrationContext):
    first = context.current_utc_datetime
    yield context.call_activity("echo", 1)
    return [first.isoformat(), context.current_utc_datetime.isoformat(), context.new_uuid()]


@app.orchestration_trigger(context_name="context")
def long_chain(context: df.DurableOrchestrationContext):
    """``steps`` activity steps, then as many more as each "more" event asks (0: finish)."""
    total, steps = 0, int(_arg(context, "steps"))
    while steps:
        for _ in range(steps):
            total += yield context.call_activity("echo", 1)
        steps = int((yield context.wait_for_external_event("more")) or 0)
    return total


@app.orchestration_trigger(context_name="context")
def sleeper(context: df.DurableOrchestrationContext):
    """Sleeps on one durable timer for ``seconds``."""
    yield context.create_timer(
        context.current_utc_datetime + timedelta(seconds=float(_arg(context, "seconds")))
    )
    return "woke"


# --- the SDK client's management calls, as an app would make them ---


def _when(text):
    return datetime.fromisoformat(text) if text else None


async def _sdk_call(client, op: str, a: dict):
    if op == "start":
        return await client.start_new(a["name"], a.get("instance_id"), a.get("input"))
    if op == "status":
        status = await client.get_status(a["instance_id"], show_history=a.get("history", False))
        return status.to_json() if status else None
    if op == "status_all":
        return sorted(s.instance_id for s in await client.get_status_all())
    if op == "status_by":
        statuses = [df.OrchestrationRuntimeStatus(s) for s in a.get("statuses", [])] or None
        found = await client.get_status_by(
            _when(a.get("from")), _when(a.get("to")), statuses, a.get("prefix")
        )
        return sorted(s.instance_id for s in found)
    if op == "purge":
        return (await client.purge_instance_history(a["instance_id"])).instances_deleted
    if op == "purge_by":
        statuses = [df.OrchestrationRuntimeStatus(s) for s in a.get("statuses", [])] or None
        result = await client.purge_instance_history_by(
            _when(a["from"]), _when(a.get("to")), statuses
        )
        return result.instances_deleted
    if op in ("suspend", "resume", "terminate", "rewind"):
        return await getattr(client, op)(a["instance_id"], a.get("reason", "by the sdk"))
    if op == "restart":
        return await client.restart(a["instance_id"], a.get("new_id", True))
    if op == "raise":
        return await client.raise_event(a["instance_id"], a["name"], a.get("data"))
    raise ValueError(f"unknown op {op}")


@app.route(route="sdk/{op}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def sdk(req: func.HttpRequest, client) -> func.HttpResponse:
    args = req.get_json() if req.get_body() else {}
    try:
        result = {"ok": True, "result": await _sdk_call(client, req.route_params["op"], args)}
    except Exception as exc:  # the SDK raises plain Exceptions: hand the text to the test
        result = {"ok": False, "error": str(exc)}
    return func.HttpResponse(json.dumps(result, default=str), mimetype="application/json")
