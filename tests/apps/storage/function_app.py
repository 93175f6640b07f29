"""A test app of the Storage extension's bindings and triggers (``tests/host/test_storage_*``).

Every binding names the connection ``AppStorage`` (the tests point it at their Azurite).
HTTP functions read and write blobs and tables and send queue messages; queue- and
blob-triggered functions record each run in the table ``runs`` (one row per run, RowKey
``{rand-guid}``) so a test can count runs; an orchestration's activity and its client
function carry bindings too, as Durable Functions allows.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
CONN = "AppStorage"


def _mark(name: str) -> None:
    """A file a test watches (``STORAGE_TEST_MARKS``): the function started."""
    folder = os.environ.get("STORAGE_TEST_MARKS")
    if folder:
        Path(folder, name).write_text(str(os.getpid()))


# --- blobs over HTTP ----------------------------------------------------------------------


@app.route(route="files/{name}", methods=["GET"])
@app.blob_input(arg_name="text", path="files/{name}.txt", connection=CONN)
def read_text(req: func.HttpRequest, text: str | None) -> func.HttpResponse:
    if text is None:
        return func.HttpResponse("missing", status_code=404)
    return func.HttpResponse(text)


@app.route(route="files/{name}", methods=["PUT"])
@app.blob_output(arg_name="out", path="files/{name}.txt", connection=CONN)
@app.queue_output(arg_name="jobs", queue_name="%JOBS_QUEUE%", connection=CONN)
def write_text(req: func.HttpRequest, out: func.Out[str], jobs: func.Out[list[str]]) -> str:
    out.set(req.get_body().decode())
    name = req.route_params["name"]
    jobs.set([json.dumps({"name": name, "text": "first"}), json.dumps({"name": name + "-2"})])
    if req.params.get("fail"):
        raise RuntimeError("failed after setting the outputs")
    return "stored"


@app.route(route="samples/{name}", methods=["PUT"])
@app.blob_output(arg_name="out", path="%SAMPLES_CONTAINER%/{name}.txt", connection=CONN)
def write_sample(req: func.HttpRequest, out: func.Out[str]) -> str:
    out.set(req.get_body().decode())
    return "stored"


@app.route(route="raw/{name}", methods=["GET"])
@app.blob_input(arg_name="data", path="raw/{name}", connection=CONN, data_type=func.DataType.BINARY)
def read_bytes(req: func.HttpRequest, data: bytes | None) -> func.HttpResponse:
    if data is None:
        return func.HttpResponse("none", status_code=404)
    return func.HttpResponse(json.dumps({"type": type(data).__name__, "hex": data.hex()}))


@app.route(route="stream/{name}", methods=["GET"])
@app.blob_input(arg_name="blob", path="raw/{name}", connection=CONN)
def read_stream(req: func.HttpRequest, blob: func.InputStream) -> func.HttpResponse:
    body = {"type": type(blob).__name__, "data": blob.read().decode(), "name": blob.name}
    return func.HttpResponse(json.dumps(body))


@app.route(route="raw/{name}", methods=["PUT"])
@app.generic_output_binding(arg_name="out", type="blob", path="raw/{name}", connection=CONN)
def write_bytes(req: func.HttpRequest, out: func.Out[bytes]) -> str:
    out.set(req.get_body())
    return "stored"


@app.route(route="stamp", methods=["POST"])
@app.blob_output(
    arg_name="out", path="%STAMP_CONTAINER%/{DateTime}/{rand-guid}.txt", connection=CONN
)
def stamp(req: func.HttpRequest, out: func.Out[str]) -> str:
    out.set("stamped")
    return "ok"


@app.route(route="named", methods=["POST"])
@app.blob_output(arg_name="out", path="files/{filename}-{Query.v}.txt", connection=CONN)
def from_body(req: func.HttpRequest, out: func.Out[str]) -> str:
    out.set("named by the body and the query")
    return "ok"


@app.route(route="echo/{who}", methods=["POST"])
@app.queue_output(arg_name="q", queue_name="echo-{who}", connection=CONN)
def echo(req: func.HttpRequest, q: func.Out[str]) -> str:
    body = req.get_json()
    q.set(f"{body['greeting']} {req.route_params['who']}")
    return "sent"


@app.timer_trigger(schedule="0 0 0 1 1 *", arg_name="timer", run_on_startup=True)
@app.blob_output(arg_name="out", path="%TIMER_CONTAINER%/{rand-guid}.txt", connection=CONN)
def on_start(timer: func.TimerRequest, out: func.Out[str]) -> None:
    out.set("ran on startup")


# --- tables ------------------------------------------------------------------------------


@app.route(route="people/{pk}/{rk}", methods=["PUT"])
@app.table_output(
    arg_name="row", table_name="people", partition_key="{pk}", row_key="{rk}", connection=CONN
)
def put_person(req: func.HttpRequest, row: func.Out[str]) -> str:
    row.set(json.dumps(req.get_json()))
    return "stored"


@app.route(route="people/{pk}/{rk}", methods=["GET"])
@app.table_input(
    arg_name="row", table_name="people", partition_key="{pk}", row_key="{rk}", connection=CONN
)
def get_person(req: func.HttpRequest, row: str | None) -> func.HttpResponse:
    if row is None:
        return func.HttpResponse("none", status_code=404)
    return func.HttpResponse(row, mimetype="application/json")


@app.route(route="people/{pk}", methods=["GET"])
@app.table_input(
    arg_name="rows",
    table_name="people",
    partition_key="{pk}",
    take=2,
    filter="Age gt 20",
    connection=CONN,
)
def list_people(req: func.HttpRequest, rows: str) -> func.HttpResponse:
    return func.HttpResponse(rows, mimetype="application/json")


# --- queue triggers ------------------------------------------------------------------------


@app.queue_trigger(arg_name="msg", queue_name="%JOBS_QUEUE%", connection=CONN)
@app.blob_output(arg_name="out", path="results/{name}.json", connection=CONN)
@app.table_output(
    arg_name="run", table_name="runs", partition_key="jobs", row_key="{rand-guid}", connection=CONN
)
def on_job(msg: func.QueueMessage, out: func.Out[str], run: func.Out[str]) -> None:
    body = msg.get_json()
    out.set(
        json.dumps(
            {
                "id": msg.id,
                "body": body,
                "dequeue_count": msg.dequeue_count,
                "insertion_time": msg.insertion_time.isoformat() if msg.insertion_time else None,
                "expiration_time": (
                    msg.expiration_time.isoformat() if msg.expiration_time else None
                ),
                "pop_receipt": msg.pop_receipt,
            }
        )
    )
    run.set(json.dumps({"name": body["name"]}))


@app.queue_trigger(arg_name="msg", queue_name="%FAILING_QUEUE%", connection=CONN)
def on_failing(msg: func.QueueMessage) -> None:
    _mark(f"failing-{msg.get_body().decode()}-{msg.dequeue_count}")
    raise RuntimeError(f"always fails ({msg.get_body().decode()})")


@app.queue_trigger(arg_name="msg", queue_name="%SLOW_QUEUE%", connection=CONN)
@app.blob_output(arg_name="out", path="results/slow-{name}.json", connection=CONN)
@app.table_output(
    arg_name="run", table_name="runs", partition_key="slow", row_key="{rand-guid}", connection=CONN
)
def on_slow(msg: func.QueueMessage, out: func.Out[str], run: func.Out[str]) -> None:
    body = msg.get_json()
    _mark(f"slow-{body['name']}-{msg.dequeue_count}")
    if msg.dequeue_count == 1:
        time.sleep(float(body.get("sleep", 0)))
    out.set(json.dumps({"try": msg.dequeue_count, "pid": os.getpid()}))
    run.set(json.dumps({"name": body["name"], "pid": os.getpid()}))


@app.queue_trigger(arg_name="msg", queue_name="%PLAIN_QUEUE%", connection=CONN)
@app.blob_output(arg_name="out", path="results/plain-{Id}.txt", connection=CONN)
def on_plain(msg: func.QueueMessage, out: func.Out[bytes]) -> None:
    out.set(msg.get_body())


# --- blob triggers -------------------------------------------------------------------------


@app.blob_trigger(arg_name="blob", path="%SAMPLES_CONTAINER%/{name}.txt", connection=CONN)
@app.blob_output(arg_name="out", path="processed/{name}.txt", connection=CONN)
@app.table_output(
    arg_name="run",
    table_name="runs",
    partition_key="samples",
    row_key="{rand-guid}",
    connection=CONN,
)
def on_sample(blob: func.InputStream, out: func.Out[str], run: func.Out[str]) -> None:
    text = blob.read().decode()
    out.set(json.dumps({"name": blob.name, "length": blob.length, "upper": text.upper()}))
    run.set(json.dumps({"blob": blob.name, "text": text}))


@app.blob_trigger(arg_name="blob", path="bad/{name}", connection=CONN)
@app.table_output(
    arg_name="run", table_name="runs", partition_key="bad", row_key="{rand-guid}", connection=CONN
)
def on_bad(blob: func.InputStream, run: func.Out[str]) -> None:
    raise RuntimeError(f"cannot process {blob.name}")


# --- Durable: a client function and an activity with bindings ---------------------------------


@app.route(route="notes/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
@app.queue_output(arg_name="audit", queue_name="audit", connection=CONN)
async def start_note(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, audit: func.Out[str]
) -> func.HttpResponse:
    name = req.route_params["name"]
    instance = await client.start_new(
        "note_flow", None, {"name": name, "text": req.get_body().decode()}
    )
    audit.set(f"started {instance}")
    return client.create_check_status_response(req, instance)


@app.orchestration_trigger(context_name="context")
def note_flow(context: df.DurableOrchestrationContext):
    note = context.get_input()
    saved = yield context.call_activity("save_note", note)
    return saved


@app.activity_trigger(input_name="note")
@app.blob_input(arg_name="before", path="notes/{name}.txt", connection=CONN)
@app.blob_output(arg_name="out", path="notes/{name}.txt", connection=CONN)
def save_note(note: dict, before: str | None, out: func.Out[str]) -> dict:
    out.set(note["text"])
    return {"had": before, "saved": note["text"]}
