"""The host's telemetry hooks in-process, with an in-memory exporter: ids, stamps and spans."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable_host.core import history as h
from durable_host.core.records import ActivityWork, Episode, MessageKind, Outgoing, OutgoingKind
from durable_host.functions.config import ConfigError
from durable_host.ops import telemetry, telemetry_setup

NOW = "2026-01-01T00:00:00.000000Z"
CALLER = {
    "TraceParent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "TraceState": None,
}
CALLER_TRACE, CALLER_SPAN = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
Spans = Callable[[], list[ReadableSpan]]


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    telemetry.configure({}, span_exporter=exporter, set_global=False)

    def finished() -> list[ReadableSpan]:
        telemetry.flush()
        return list(exporter.get_finished_spans())

    yield finished
    telemetry.shutdown()


def started(
    instance_id: str = "i1", execution_id: str = "e1", carried: Any = CALLER
) -> dict[str, Any]:
    event = h.execution_started(
        at=NOW,
        name="flow",
        instance_id=instance_id,
        execution_id=execution_id,
        input_json='"secret input"',
        version="",
    )
    return {**event, "ParentTraceContext": carried} if carried else event


def sending_episode() -> Episode:
    child = h.execution_started(
        at=NOW, name="child", instance_id="i1:c", execution_id="", input_json=None, version=""
    )
    request = {"op": "add", "id": "r1", "parent": "i1", "parentExecution": "e1", "input": "1"}
    return Episode(
        consumed=[1],
        events=[h.orchestrator_started(NOW), h.orchestrator_completed(NOW)],
        outbox=[
            Outgoing(OutgoingKind.MESSAGE, "i1:c", {"kind": MessageKind.START, "event": child}),
            Outgoing(
                OutgoingKind.MESSAGE, "@counter@k", {"kind": MessageKind.OP, "request": request}
            ),
            Outgoing(OutgoingKind.ACTIVITY, "i1", {"name": "work"}),
            Outgoing(OutgoingKind.MESSAGE, "i1:d", {"kind": MessageKind.REWIND, "start": child}),
        ],
    )


def test_the_standard_settings_choose_the_exporters_and_unset_means_off():
    assert telemetry_setup.exporters({}, "traces") == []
    assert telemetry_setup.exporters({"OTEL_TRACES_EXPORTER": "console"}, "traces") == ["console"]
    assert telemetry_setup.exporters({"OTEL_TRACES_EXPORTER": "otlp, console"}, "traces") == [
        "otlp",
        "console",
    ]
    assert telemetry_setup.exporters({"OTEL_METRICS_EXPORTER": "none"}, "metrics") == []
    assert telemetry_setup.exporters(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "metrics"
    ) == ["otlp"]
    off = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}
    assert telemetry_setup.exporters(off, "traces") == []
    with pytest.raises(ConfigError, match="zipkin"):
        telemetry_setup.exporters({"OTEL_TRACES_EXPORTER": "zipkin"}, "traces")
    grpc = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(ConfigError, match="http/protobuf"):
        telemetry_setup.exporters(grpc, "traces")
    assert telemetry.configure({}).startswith("telemetry off")
    assert not telemetry.enabled()


def test_while_off_an_episode_sends_exactly_what_it_decided():
    episode = sending_episode()
    before = [item.payload for item in episode.outbox]

    assert telemetry.trace_episode("i1", [started()], episode) is None
    assert [item.payload for item in episode.outbox] == before
    assert "ParentTraceContext" not in before[0]["event"]


def test_an_episode_stamps_its_children_and_entity_operations_with_its_own_span(spans):
    episode = sending_episode()
    original = episode.outbox[0].payload

    found = telemetry.trace_episode("i1", [h.orchestrator_started(NOW), started()], episode)

    assert found is not None
    assert (found.span.trace_id, found.span.span_id) == (
        CALLER_TRACE,
        telemetry.orchestration_span_id("i1", "e1"),
    )
    child, op, rewound = (
        telemetry.parse(x)
        for x in (
            episode.outbox[0].payload["event"]["ParentTraceContext"],
            episode.outbox[1].payload["request"]["parentTraceContext"],
            episode.outbox[3].payload["start"]["ParentTraceContext"],
        )
    )
    assert child == op == rewound and child is not None
    assert (child.trace_id, child.span_id) == (found.span.trace_id, found.span.span_id)
    assert "ParentTraceContext" not in original["event"]  # the decided payload is not mutated
    assert episode.outbox[2].payload == {"name": "work"}


def test_each_committed_episode_is_one_span_and_the_last_one_ends_the_orchestration(spans):
    history = [started()]
    episode = Episode(consumed=[1, 2], events=[h.orchestrator_started(NOW)], status="Completed")
    found = telemetry.trace_episode("i1", history, Episode(consumed=[1]))

    telemetry.episode_done(found, Episode(consumed=[1]), 0.0, "Running", 1)
    telemetry.episode_done(found, episode, 0.0, "Running", 1)
    telemetry.episode_done(found, Episode(consumed=[3]), 0.0, "Completed", 2)  # a late message

    names = [s.name for s in spans()]
    assert names == ["episode:flow", "episode:flow", "orchestration:flow", "episode:flow"]
    orchestration = spans()[2]
    assert orchestration.context.span_id == telemetry.orchestration_span_id("i1", "e1")
    assert orchestration.context.trace_id == CALLER_TRACE
    assert orchestration.parent is not None and orchestration.parent.span_id == CALLER_SPAN
    assert {s.parent.span_id for s in spans() if s.name == "episode:flow"} == {
        orchestration.context.span_id
    }
    assert orchestration.start_time == int(h.parse_time(NOW).timestamp() * 1e9)
    assert dict(orchestration.attributes)["durabletask.runtime_status"] == "Completed"


def test_an_instance_started_without_a_trace_context_roots_a_trace_of_its_own(spans):
    found = telemetry.trace_episode(
        "i2", [started("i2", "e9", carried=None)], Episode(consumed=[1])
    )
    assert found is not None and found.parent is None

    telemetry.episode_done(found, Episode(consumed=[1], status="Failed"), 0.0, "Running", 1)

    root = next(s for s in spans() if s.name == "orchestration:flow")
    assert root.parent is None
    assert root.context.trace_id == telemetry.derived_trace_id("i2", "e9")
    assert root.status.status_code == trace.StatusCode.ERROR


class History:
    """The one store read the activity side makes, after a restart."""

    def __init__(self, events: list[dict[str, Any]]):
        self.events, self.reads = events, 0

    async def get_history(self, instance_id: str) -> list[dict[str, Any]]:
        self.reads += 1
        return self.events


def test_an_activity_run_is_one_span_under_its_orchestration_and_current_while_it_runs(spans):
    store = History([started("i3", "e3")])
    work = ActivityWork(7, "i3", "e3", 4, "work", '"secret input"', 2)
    seen: list[int] = []

    async def run() -> dict[str, Any]:
        seen.append(trace.get_current_span().get_span_context().span_id)
        event = h.task_failed(4, NOW, "Activity function 'work' failed: secret reason", "trace")
        return {"kind": MessageKind.EVENT, "event": event, "execution_id": "e3"}

    asyncio.run(telemetry.run_activity(store, work, 2, run()))
    asyncio.run(telemetry.run_activity(store, work, 3, run()))

    first, second = spans()
    assert store.reads == 1  # found after a restart once, then remembered
    assert seen == [first.context.span_id, second.context.span_id]
    assert first.parent is not None
    assert (first.context.trace_id, first.parent.span_id) == (
        CALLER_TRACE,
        telemetry.orchestration_span_id("i3", "e3"),
    )
    attributes = dict(first.attributes)
    assert attributes["durabletask.activity.attempt"] == 2
    assert attributes["durabletask.activity.outcome"] == "failed"
    assert "secret" not in repr(attributes) + repr(first.status) + repr(first.events)


def test_an_entity_batch_hangs_from_its_first_sender_and_links_the_others(spans):
    other = {"TraceParent": "00-11111111111111111111111111111111-2222222222222222-01"}
    messages = [
        (
            1,
            {
                "kind": MessageKind.OP,
                "request": {"op": "add", "id": "a", "parentTraceContext": CALLER},
            },
        ),
        (
            2,
            {
                "kind": MessageKind.OP,
                "request": {"op": "get", "id": "b", "parentTraceContext": other},
            },
        ),
        (3, {"kind": MessageKind.OP, "request": {"op": "add", "id": "c", "signal": True}}),
    ]

    telemetry.entity_batch_done("@counter@k", messages, 0.0, None)

    [batch] = spans()
    assert batch.name == "entity:counter"
    assert batch.parent is not None and batch.parent.span_id == CALLER_SPAN
    assert [link.context.span_id for link in batch.links] == [0x2222222222222222]
    attributes = dict(batch.attributes)
    assert attributes["durabletask.entity.operations"] == 3
    assert list(attributes["durabletask.entity.operation_names"]) == ["add", "get"]
    assert attributes["durabletask.entity.signals"] == 1
