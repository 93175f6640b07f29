"""Telemetry of a whole turn, read back from the host's own console exporters.

The host runs as its own process with the standard settings ``OTEL_TRACES_EXPORTER=console``
and ``OTEL_METRICS_EXPORTER=console``, writing JSON lines to ``DURABLE_HOST_TELEMETRY_FILE``;
the test submits one turn (a calculator round and an answer round, through the
OpenAI-compatible path with a key), stops the host so the exporters flush, and checks the
spans and metrics it wrote: one span per episode, activity and entity batch (the counts the
host's own metrics report), one tree per submission rooted at the caller's ``traceparent``,
model and tool spans with their attributes, and no secret or text anywhere.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.common import ids
from tests.app.turn_support import ModelServer, start_turn_host, wait_final
from tests.harness import WEBHOOK, HostProcess, settled, store_specs

SESSION = "traced"
API_KEY = "sk-telemetry-test-6b1f0e"
MODEL = "gpt-traced"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TEXT = "calculate 2+3"


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=store_specs())
def traced(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[dict[str, Any]]:
    """Run one turn on a traced host, stop it, and hand over what it recorded."""
    tmp = tmp_path_factory.mktemp("telemetry")
    out = tmp / "telemetry.jsonl"
    host = start_turn_host(
        request,
        str(request.param),
        tmp,
        {
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "agent-kernel-test",
            "DURABLE_HOST_TELEMETRY_FILE": str(out),
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_MODEL_API_KEY": API_KEY,
            "AGENT_MODEL_NAME": MODEL,
        },
    )
    calls_before = len(model.requests)  # the model server serves every store's host
    try:
        sub = submit_traced(host)
        assert wait_final(host, SESSION, sub)["status"] == "completed"
        turn = ids.turn_instance_id(SESSION, sub)
        host.wait_for_status(turn)
        # Counted once settled: an episode or entity batch in progress is in neither
        # ``ready`` nor ``running_activities``, so one quiet read could count one less than
        # the spans exported at the stop.
        metrics = settled(host)
        stored = stored_text(host)
        assert host.stop() == 0
    finally:
        host.kill()
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    yield {
        "spans": [line for line in lines if "context" in line],
        "metrics": [line for line in lines if "resource_metrics" in line],
        "raw": out.read_text(),
        "log": Path(str(host.log_path)).read_text(),
        "stored": stored,
        "host_metrics": metrics,
        "turn": turn,
        "sub": sub,
        "model_calls": len(model.requests) - calls_before,
    }


def submit_traced(host: HostProcess) -> str:
    response = host.post(
        f"/api/sessions/{SESSION}/submissions",
        {"requestId": "r1", "text": TEXT},
        headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
    )
    assert response.status == 202, (response.status, response.body)
    return str(response.json()["submissionId"])


def stored_text(host: HostProcess) -> str:
    """Every instance's status with input, history and outputs, and the session's view."""
    listed = host.get(f"{WEBHOOK}/instances?showInput=true").json()
    query = "?showInput=true&showHistory=true&showHistoryOutput=true"
    bodies = [host.get(f"{WEBHOOK}/instances/{i['instanceId']}{query}").body for i in listed]
    bodies.append(host.get(f"/api/sessions/{SESSION}").body)
    assert len(bodies) > 5
    return b"\n".join(bodies).decode()


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    return span.get("attributes") or {}


def hexid(value: str | None) -> str | None:
    return value.removeprefix("0x") if value else None


def by_kind(spans: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [s for s in spans if attrs(s).get("durabletask.type") == kind]


def instance(span: dict[str, Any]) -> str:
    return str(attrs(span).get("durabletask.task.instance_id", ""))


def test_one_span_per_episode_activity_and_entity_batch(traced):
    spans, counts = traced["spans"], traced["host_metrics"]

    assert len(by_kind(spans, "episode")) == counts["episodes"]
    assert len(by_kind(spans, "activity")) == counts["activity_runs"]
    assert len(by_kind(spans, "entity")) == counts["entity_batches"]
    assert len({s["context"]["span_id"] for s in spans}) == len(spans)
    executions = Counter(
        (instance(s), attrs(s)["durabletask.task.execution_id"])
        for s in by_kind(spans, "orchestration")
    )
    assert executions and set(executions.values()) == {1}


def test_the_submission_is_one_tree_rooted_at_the_callers_traceparent(traced):
    spans = traced["spans"]
    ids_ = {hexid(s["context"]["span_id"]): s for s in spans}
    # The test's polling (GET ...) makes traces of its own; everything else is the turn's.
    turn_spans = [s for s in spans if not s["name"].startswith("GET ")]
    [root] = [s for s in turn_spans if s["name"] == "POST sessions/{sessionId}/submissions"]

    assert {hexid(s["context"]["trace_id"]) for s in turn_spans} == {TRACE_ID}
    assert hexid(root["parent_id"]) == CALLER_SPAN
    # every other span hangs from a span that was recorded: one tree, no orphans
    assert [
        s["name"] for s in turn_spans if s is not root and hexid(s["parent_id"]) not in ids_
    ] == []

    def chain(span: dict[str, Any]) -> list[str]:
        names = []
        while span is not None:
            names.append(span["name"])
            span = ids_.get(hexid(span["parent_id"]))
        return names

    chat = next(s for s in spans if s["name"] == f"chat {MODEL}")
    tool = next(s for s in spans if s["name"] == "execute_tool calculator")
    upper = [
        "orchestration:agent_round",
        "orchestration:agent_run",
        "orchestration:agent_turn",
        "create_orchestration:agent_turn",
        "POST sessions/{sessionId}/submissions",
    ]
    assert chain(chat) == [f"chat {MODEL}", "activity:call_model", *upper]
    assert chain(tool) == [
        "execute_tool calculator",
        "activity:execute_tool",
        "orchestration:tool_task",
        *upper,
    ]
    turn = next(s for s in by_kind(spans, "orchestration") if instance(s) == traced["turn"])
    assert attrs(turn)["durabletask.runtime_status"] == "Completed"
    episodes = [s for s in by_kind(spans, "episode") if instance(s) == traced["turn"]]
    assert episodes and {hexid(s["parent_id"]) for s in episodes} == {
        hexid(turn["context"]["span_id"])
    }


def test_model_and_tool_spans_carry_ids_tokens_and_outcome(traced):
    spans = traced["spans"]
    chats = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "chat"]
    tools = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]

    assert len(chats) == traced["model_calls"] == 2
    for span in chats:
        found = attrs(span)
        assert found["gen_ai.request.model"] == MODEL
        assert found["gen_ai.usage.input_tokens"] > 0
        assert found["gen_ai.usage.output_tokens"] > 0
        assert found["agent.session_id"] == SESSION
        assert found["agent.submission_id"] == traced["sub"]
    assert sorted(attrs(s)["agent.round"] for s in chats) == ["1", "2"]
    [tool] = tools
    assert {
        k: attrs(tool)[k] for k in ("gen_ai.tool.name", "agent.tool.outcome", "agent.tool.ok")
    } == {
        "gen_ai.tool.name": "calculator",
        "agent.tool.outcome": "done",
        "agent.tool.ok": True,
    }
    assert attrs(tool)["agent.round"] == "1"
    assert attrs(tool)["agent.submission_id"] == traced["sub"]


def test_token_and_latency_metrics_are_labelled_by_model(traced):
    points: dict[str, list[dict[str, Any]]] = {}
    for export in traced["metrics"]:
        for resource in export["resource_metrics"]:
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    points[metric["name"]] = metric["data"]["data_points"]  # cumulative: last wins
    chats = [s for s in traced["spans"] if attrs(s).get("gen_ai.operation.name") == "chat"]

    tokens = {
        p["attributes"]["gen_ai.token.type"]: p["value"]
        for p in points["agent.model.tokens"]
        if p["attributes"]["gen_ai.request.model"] == MODEL
    }
    assert tokens == {
        "input": sum(attrs(s)["gen_ai.usage.input_tokens"] for s in chats),
        "output": sum(attrs(s)["gen_ai.usage.output_tokens"] for s in chats),
    }
    [latency] = points["gen_ai.client.operation.duration"]
    assert latency["attributes"]["gen_ai.request.model"] == MODEL
    assert latency["count"] == len(chats)
    assert "durabletask.episode.duration" in points and "durabletask.activity.duration" in points


def test_no_secret_reaches_spans_metrics_logs_histories_or_statuses(traced):
    assert TEXT in traced["stored"]  # the text is the session's data; the key is nobody's
    for where in ("raw", "log", "stored"):
        assert API_KEY not in traced[where]
    assert TEXT not in traced["raw"]
    assert "2+3" not in traced["raw"]
    allowed = ("durabletask.", "agent.", "gen_ai.", "http.", "faas.", "error.type")
    keys = {k for s in traced["spans"] for k in attrs(s)}
    assert [k for k in keys if not k.startswith(allowed)] == []
