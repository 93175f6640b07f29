"""The host's spans for any app (the basic test app): traces that survive executions,
entity calls, HTTP signals and a crash, read back from the console exporter's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harness import HostProcess, wait_for

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}


@pytest.fixture
def traced_host(make_host, tmp_path):
    out = tmp_path / "telemetry.jsonl"

    def factory() -> HostProcess:
        env = {"OTEL_TRACES_EXPORTER": "console", "DURABLE_HOST_TELEMETRY_FILE": str(out)}
        return make_host("basic", env=env)

    factory.out = out  # type: ignore[attr-defined]
    return factory


def spans_in(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    return span.get("attributes") or {}


def hexid(value: str | None) -> str | None:
    return value.removeprefix("0x") if value else None


def start(host: HostProcess, name: str, body: Any = None) -> str:
    """Through the app's own starter: its SDK client sends the function's span on."""
    response = host.post(f"/api/orchestrators/{name}", body, headers=TRACEPARENT)
    assert response.status == 202, response.body
    return str(response.json()["id"])


def test_executions_entity_calls_and_http_signals_share_their_callers_trace(traced_host):
    host = traced_host().start()
    looping = start(host, "counter_loop", 0)
    calling = start(host, "counter_caller", "k1")
    for instance in (looping, calling):
        assert host.wait_for_status(instance)["runtimeStatus"] == "Completed"
    signalled = host.post("/api/entities/counter/k2?op=add", 5, headers=TRACEPARENT)
    assert signalled.status == 202
    wait_for(lambda: host.get("/api/entities/counter/k2").json()["exists"], 30, "the signal")
    assert host.stop() == 0
    spans = spans_in(traced_host.out)
    by_id = {hexid(s["context"]["span_id"]): s for s in spans}

    executions = [s for s in spans if s["name"] == "orchestration:counter_loop"]
    assert sorted(attrs(s)["durabletask.runtime_status"] for s in executions) == [
        "Completed",
        "ContinuedAsNew",
        "ContinuedAsNew",
        "ContinuedAsNew",
    ]
    assert len({s["context"]["span_id"] for s in executions}) == 4
    assert {hexid(s["context"]["trace_id"]) for s in executions} == {TRACE_ID}
    create = by_id[hexid(executions[0]["parent_id"])]
    assert create["name"] == "create_orchestration:counter_loop"
    assert {s["parent_id"] for s in executions} == {create["context"]["span_id"]}
    starter = by_id[hexid(create["parent_id"])]
    assert starter["name"] == "POST orchestrators/{name}/{instance_id?}"
    assert hexid(starter["parent_id"]) == CALLER_SPAN

    caller = next(s for s in spans if s["name"] == "orchestration:counter_caller")
    batches = [s for s in spans if s["name"] == "entity:counter"]
    k1 = [s for s in batches if attrs(s)["durabletask.task.instance_id"] == "@counter@k1"]
    assert k1 and {s["parent_id"] for s in k1} == {caller["context"]["span_id"]}
    [k2] = [s for s in batches if attrs(s)["durabletask.task.instance_id"] == "@counter@k2"]
    server = by_id[hexid(k2["parent_id"])]
    assert server["name"] == "POST entities/{name}/{key}"
    assert hexid(server["parent_id"]) == CALLER_SPAN
    assert {hexid(s["context"]["trace_id"]) for s in [*k1, k2]} == {TRACE_ID}


@pytest.mark.crash
def test_an_activity_run_again_after_a_crash_stays_under_its_orchestration(traced_host):
    host = traced_host()
    host.start(faults="activity.before_complete@1")
    instance = start(host, "hello_sequence")
    assert host.wait_exit(30) != 0, "the fault point was not reached"
    host.start()
    assert host.wait_for_status(instance)["runtimeStatus"] == "Completed"
    started = host.status(instance, "?showHistory=true")["historyEvents"][0]
    assert host.stop() == 0
    spans = spans_in(traced_host.out)

    [orchestration] = [s for s in spans if s["name"] == "orchestration:hello_sequence"]
    reruns = [
        s
        for s in spans
        if s["name"] == "activity:say_hello" and attrs(s)["durabletask.activity.attempt"] == 2
    ]
    assert len(reruns) == 1
    assert reruns[0]["parent_id"] == orchestration["context"]["span_id"]
    assert {hexid(s["context"]["trace_id"]) for s in spans} == {TRACE_ID}
    # the execution's parent is the start's span, kept in its ExecutionStarted across the crash
    parent_span = started["ParentTraceContext"]["TraceParent"].split("-")[2]
    assert hexid(orchestration["parent_id"]) == parent_span
    assert started["ParentTraceContext"]["TraceParent"].split("-")[1] == TRACE_ID
