"""OpenTelemetry traces and metrics of the host: the shell's spans, never the cores'. IO.

Off unless the standard ``OTEL_*`` settings turn it on (``configure``; which settings, and
what they choose: ``telemetry_setup``). While off, every hook returns at once and nothing is
added to any history or message.

The trace of an instance (``docs/telemetry.md``):

* ``create_orchestration:{name}`` - a start accepted by the client (HTTP, the SDK's RPC), the
  child of the request's ``traceparent``. Its context is written into the start's
  ``ExecutionStarted`` as ``ParentTraceContext`` (the extension's field), so it is durable.
* ``orchestration:{name}`` - one execution: from its ``ExecutionStarted`` to the episode that
  ends it (completed, failed, terminated or continued as new), emitted once by that episode.
  Its span id is a hash of (instance id, execution id), so every later span can name it as
  its parent without storing anything; its parent is ``ParentTraceContext``.
* ``episode:{name}`` - one per committed episode, never per replayed event; child of its
  orchestration span. A sub-orchestration's start and an entity operation sent by an episode
  carry the orchestration span as ``ParentTraceContext`` / ``parentTraceContext``.
* ``activity:{name}`` - one per activity run (a re-run after a crash is a second span), child
  of the orchestration span; it is the current span while the activity runs, so the app's own
  spans nest under it.
* ``entity:{name}`` - one per entity batch, child of the first operation's sender, linked to
  the other senders.
* ``{METHOD} {route}`` - one per call of an app HTTP function (SERVER), the child of the
  request's ``traceparent``; the SDK's client sends it on with ``start_new``.
* ``mcp {method} {name}`` - one per MCP call of an app function (``tools/call``,
  ``resources/read``, ``prompts/get``), SERVER, the child of the request's ``traceparent``.

An instance started without a trace context (telemetry was off) gets a trace id hashed from
its instance and execution ids. Attributes are ids, names, counts, statuses and durations:
never an input, output, reason, custom status, query string or exception message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from durable_host.core import history as h
from durable_host.core.records import (
    TERMINAL,
    ActivityWork,
    Episode,
    MessageKind,
    RuntimeStatus,
)
from durable_host.ops import telemetry_setup

log = logging.getLogger("durable_host.telemetry")
T = TypeVar("T")
SCOPE = "durable_host"
REMEMBERED = 10_000  # instances whose trace context the activity side finds without a read
_ENDED = TERMINAL | {RuntimeStatus.CONTINUED_AS_NEW}
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclasses.dataclass(frozen=True, slots=True)
class InstanceTrace:
    """Where one orchestration execution sits in its trace."""

    instance_id: str
    execution_id: str
    name: str
    span: SpanContext  # the execution's own span (deterministic id)
    parent: SpanContext | None  # from ParentTraceContext; None: the root of its trace
    started_at: str  # the ExecutionStarted timestamp


@dataclasses.dataclass
class _Telemetry:
    setup: telemetry_setup.Setup
    tracer: trace.Tracer
    instruments: dict[str, Any]
    instances: OrderedDict[str, InstanceTrace] = dataclasses.field(default_factory=OrderedDict)


_state: _Telemetry | None = None


# --- configuration ----------------------------------------------------------------------------


def configure(
    environ: Mapping[str, str],
    *,
    span_exporter: SpanExporter | None = None,
    metric_reader: Any = None,
    set_global: bool = True,
) -> str:
    """Set up the SDK from ``environ`` (``telemetry_setup``); a line for the start-up log.

    ``span_exporter`` / ``metric_reader`` replace the configured ones (tests in-process);
    ``set_global`` makes the providers the process's own, so the app's spans (through
    ``opentelemetry-api``) and the SDK client's ``traceparent`` join the host's traces.
    Raises ``ConfigError`` for a setting this host cannot honour.
    """
    global _state
    shutdown()
    setup = telemetry_setup.build(environ, span_exporter, metric_reader)
    if setup is None:
        return "telemetry off (set OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER to turn it on)"
    if set_global and setup.tracer_provider is not None:
        trace.set_tracer_provider(setup.tracer_provider)
    if set_global and setup.meter_provider is not None:
        metrics.set_meter_provider(setup.meter_provider)
    tracer = (setup.tracer_provider or trace.NoOpTracerProvider()).get_tracer(SCOPE)
    _state = _Telemetry(setup, tracer, _instruments(setup.meter_provider))
    return setup.description


def shutdown() -> None:
    """Flush and stop the exporters (the host's stop); telemetry is off afterwards."""
    global _state
    state, _state = _state, None
    if state is not None:
        state.setup.shutdown()


def enabled() -> bool:
    return _state is not None


def flush() -> None:
    """Export every ended span now (tests; a stop flushes by itself)."""
    if _state is not None and _state.setup.tracer_provider is not None:
        _state.setup.tracer_provider.force_flush()


def _instruments(provider: MeterProvider | None) -> dict[str, Any]:
    if provider is None:
        return {}
    meter = provider.get_meter(SCOPE)

    def seconds(name: str, what: str) -> Any:
        return meter.create_histogram(name, unit="s", description=what)

    return {
        "episode": seconds(
            "durabletask.episode.duration", "one orchestration episode: replay and commit"
        ),
        "activity": seconds("durabletask.activity.duration", "one activity run"),
        "entity": seconds("durabletask.entity.batch.duration", "one entity batch and its commit"),
    }


# --- ids and contexts -------------------------------------------------------------------------


def _hashed(bits: int, *parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def orchestration_span_id(instance_id: str, execution_id: str) -> int:
    return _hashed(64, "orchestration", instance_id, execution_id)


def derived_trace_id(instance_id: str, execution_id: str) -> int:
    """The trace of an instance that was started without a trace context."""
    return _hashed(128, "trace", instance_id, execution_id)


def parse(carried: Any) -> SpanContext | None:
    """A ``{"TraceParent", "TraceState"}`` value (the extension's shape) as a span context."""
    if not isinstance(carried, dict) or not isinstance(carried.get("TraceParent"), str):
        return None
    carrier = {"traceparent": carried["TraceParent"]}
    if isinstance(carried.get("TraceState"), str):
        carrier["tracestate"] = carried["TraceState"]
    found = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def carried(span: SpanContext) -> dict[str, str | None]:
    """``span`` in the extension's ``ParentTraceContext`` shape."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(NonRecordingSpan(span)))
    return {"TraceParent": carrier["traceparent"], "TraceState": carrier.get("tracestate")}


def instance_trace(
    instance_id: str, started: dict[str, Any] | None, execution_id: str | None = None
) -> InstanceTrace:
    """The trace position of an execution, from its ``ExecutionStarted`` (None: unknown)."""
    started = started or {}
    execution = (
        execution_id or (started.get("OrchestrationInstance") or {}).get("ExecutionId") or ""
    )
    parent = parse(started.get("ParentTraceContext"))
    trace_id = parent.trace_id if parent else derived_trace_id(instance_id, execution)
    flags = parent.trace_flags if parent else trace.TraceFlags(trace.TraceFlags.SAMPLED)
    span = SpanContext(
        trace_id,
        orchestration_span_id(instance_id, execution),
        is_remote=True,
        trace_flags=flags,
        trace_state=parent.trace_state if parent else None,
    )
    stamp = started.get("Timestamp") or ""
    return InstanceTrace(instance_id, execution, started.get("Name") or "", span, parent, stamp)


def _under(span: SpanContext | None) -> otel_context.Context:
    return trace.set_span_in_context(NonRecordingSpan(span)) if span else otel_context.Context()


def _ns_since(began: float) -> int:
    """The wall-clock time (ns) of ``began``, a ``time.perf_counter()`` reading."""
    return time.time_ns() - int((time.perf_counter() - began) * 1e9)


def _time_ns(stamp: str) -> int | None:
    try:
        moment: datetime = h.parse_time(stamp)
    except (TypeError, ValueError):
        return None
    return int(moment.timestamp() * 1e9)


def _remember(state: _Telemetry, trace_: InstanceTrace) -> None:
    state.instances[trace_.instance_id] = trace_
    state.instances.move_to_end(trace_.instance_id)
    while len(state.instances) > REMEMBERED:
        state.instances.popitem(last=False)


def _attributes(trace_: InstanceTrace, kind: str, **more: Any) -> dict[str, Any]:
    return {
        "durabletask.type": kind,
        "durabletask.task.name": trace_.name,
        "durabletask.task.instance_id": trace_.instance_id,
        "durabletask.task.execution_id": trace_.execution_id,
        **{k: v for k, v in more.items() if v is not None},
    }


# --- the engine: episodes, orchestrations, entity batches ---------------------------------------


def trace_episode(
    instance_id: str, history: list[dict[str, Any]], episode: Episode
) -> InstanceTrace | None:
    """Before the commit: place the episode and stamp what it sends with its orchestration span.

    A sub-orchestration start without ``ParentTraceContext`` (also the one a rewind sends a
    child) and an entity operation without ``parentTraceContext`` get this execution's span;
    they are committed with the episode, so the link survives a restart. None while telemetry
    is off (nothing is stamped).
    """
    state = _state
    if state is None:
        return None
    fresh = episode.replace_history or episode.rewrite_history
    started = _execution_started(episode.events if fresh else history) or _execution_started(
        episode.events
    )
    found = instance_trace(instance_id, started, episode.execution_id if started is None else None)
    if not found.name:
        found = dataclasses.replace(found, name=episode.name or "")
    _remember(state, found)
    stamp = carried(found.span)
    outbox = []
    for item in episode.outbox:
        payload = item.payload
        if payload.get("kind") == MessageKind.START and not payload["event"].get(
            "ParentTraceContext"
        ):
            payload = {**payload, "event": {**payload["event"], "ParentTraceContext": stamp}}
        elif payload.get("kind") == MessageKind.OP and not payload["request"].get(
            "parentTraceContext"
        ):
            payload = {**payload, "request": {**payload["request"], "parentTraceContext": stamp}}
        elif payload.get("kind") == MessageKind.REWIND and isinstance(payload.get("start"), dict):
            # a rewound child may start over from this start: it stays under its parent
            payload = {**payload, "start": {**payload["start"], "ParentTraceContext": stamp}}
        outbox.append(
            item if payload is item.payload else dataclasses.replace(item, payload=payload)
        )
    episode.outbox = outbox
    return found


def episode_done(
    found: InstanceTrace | None,
    episode: Episode,
    began: float,
    previous_status: str | None,
    history_events: int,
) -> None:
    """After the commit: the episode's span; the orchestration's span if the episode ended it."""
    state = _state
    if state is None or found is None:
        return
    start, end = _ns_since(began), time.time_ns()
    status = episode.status or previous_status
    span = state.tracer.start_span(
        f"episode:{found.name}",
        context=_under(found.span),
        attributes=_attributes(
            found,
            "episode",
            **{
                "durabletask.runtime_status": str(status) if status else None,
                "durabletask.episode.messages": len(episode.consumed),
                "durabletask.episode.history_events": history_events,
                "durabletask.episode.new_events": len(episode.events),
                "durabletask.episode.sent": len(episode.outbox),
            },
        ),
        start_time=start,
    )
    span.end(end)
    if "episode" in state.instruments:
        state.instruments["episode"].record(
            (end - start) / 1e9, {"durabletask.task.name": found.name}
        )
    if episode.status in _ENDED and episode.status != previous_status:
        _orchestration_span(state, found, str(episode.status), end)


def _orchestration_span(state: _Telemetry, found: InstanceTrace, status: str, end: int) -> None:
    token = telemetry_setup.pinned.set((found.span.trace_id, found.span.span_id))
    try:
        span = state.tracer.start_span(
            f"orchestration:{found.name}",
            context=_under(found.parent),
            kind=SpanKind.SERVER,
            attributes=_attributes(
                found, "orchestration", **{"durabletask.runtime_status": status}
            ),
            start_time=_time_ns(found.started_at) or end,
        )
    finally:
        telemetry_setup.pinned.reset(token)
    if status in (RuntimeStatus.FAILED, RuntimeStatus.TERMINATED):
        span.set_status(StatusCode.ERROR)
    span.end(end)


def entity_batch_done(
    instance_id: str, messages: list[tuple[int, dict[str, Any]]], began: float, poison: str | None
) -> None:
    """After an entity batch's commit: its span, under the first sender, linked to the rest."""
    state = _state
    if state is None:
        return
    requests = [m["request"] for _, m in messages if m.get("kind") == MessageKind.OP]
    senders: list[SpanContext] = []
    for request in requests:
        sender = parse(request.get("parentTraceContext"))
        if sender is not None and sender not in senders:
            senders.append(sender)
    name = instance_id[1:].partition("@")[0]
    start, end = _ns_since(began), time.time_ns()
    span = state.tracer.start_span(
        f"entity:{name}",
        context=_under(senders[0] if senders else None),
        links=[Link(sender) for sender in senders[1:]],
        attributes={
            "durabletask.type": "entity",
            "durabletask.task.name": name,
            "durabletask.task.instance_id": instance_id,
            "durabletask.entity.operations": len(requests),
            "durabletask.entity.operation_names": sorted({str(r.get("op", "")) for r in requests}),
            "durabletask.entity.signals": sum(1 for r in requests if r.get("signal")),
        },
        start_time=start,
    )
    if poison is not None:
        span.set_attribute("durabletask.poison", True)
        span.set_status(StatusCode.ERROR)
    span.end(end)
    if "entity" in state.instruments:
        state.instruments["entity"].record((end - start) / 1e9, {"durabletask.task.name": name})


def _execution_started(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((e for e in events if e.get("EventType") == h.EventType.EXECUTION_STARTED), None)


# --- the activity runner ------------------------------------------------------------------------


async def run_activity(
    store: Any, work: ActivityWork, attempts: int, run: Awaitable[dict[str, Any]]
) -> dict[str, Any]:
    """Await ``run`` (one activity run) inside its span; returns its completion message.

    The parent is the orchestration span of the work's execution: remembered from the episode
    that scheduled it, or, after a restart, read from the instance's ``ExecutionStarted``
    (``store.get_history``; only while telemetry is on).
    """
    state = _state
    if state is None:
        return await run
    try:
        found = state.instances.get(work.instance_id)
        if found is None or found.execution_id != work.execution_id:
            started = _execution_started(await store.get_history(work.instance_id))
            found = instance_trace(work.instance_id, started, work.execution_id)
            _remember(state, found)
        parent: SpanContext | None = found.span
    except Exception:  # telemetry must never keep an activity from running
        log.debug("no trace context for activity %s", work.name, exc_info=True)
        parent = None
    began = time.perf_counter()
    with state.tracer.start_as_current_span(
        f"activity:{work.name}",
        context=_under(parent),
        attributes={
            "durabletask.type": "activity",
            "durabletask.task.name": work.name,
            "durabletask.task.instance_id": work.instance_id,
            "durabletask.task.execution_id": work.execution_id,
            "durabletask.task.task_id": work.task_id,
            "durabletask.activity.attempt": attempts,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            message = await run
        except BaseException as exc:  # cancelled at stop: the run is abandoned, not failed
            span.set_attribute("error.type", type(exc).__qualname__)
            _activity_outcome(state, span, work.name, "abandoned", began)
            raise
        failed = message.get("event", {}).get("EventType") == h.EventType.TASK_FAILED
        _activity_outcome(state, span, work.name, "failed" if failed else "completed", began)
    return message


def _activity_outcome(
    state: _Telemetry, span: trace.Span, name: str, outcome: str, began: float
) -> None:
    span.set_attribute("durabletask.activity.outcome", outcome)
    if outcome != "completed":
        span.set_status(StatusCode.ERROR)
    if "activity" in state.instruments:
        state.instruments["activity"].record(
            time.perf_counter() - began,
            {"durabletask.task.name": name, "durabletask.activity.outcome": outcome},
        )


# --- HTTP and the client ------------------------------------------------------------------------


@web.middleware
async def extract_context(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Make a request's W3C ``traceparent`` the current context while it is handled."""
    if _state is None or "traceparent" not in request.headers:
        return await handler(request)
    token = otel_context.attach(_PROPAGATOR.extract(request.headers))
    try:
        return await handler(request)
    finally:
        otel_context.detach(token)


@contextmanager
def _function_span(
    state: _Telemetry, name: str, kind: SpanKind, attributes: dict[str, Any], **on_error: Any
) -> Iterator[trace.Span]:
    """The span around one app function's call: an exception marks it failed, with its type
    (and ``on_error``'s attributes), and goes on."""
    with state.tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            for key, value in on_error.items():
                span.set_attribute(key.replace("_", "."), value)
            span.set_status(StatusCode.ERROR)
            raise


async def run_function(name: str, route: str, method: str, call: Awaitable[T]) -> T:
    """Await ``call`` (an app HTTP function) inside its SERVER span; the path and query are
    not recorded (a query may carry a key), only the route template."""
    state = _state
    if state is None:
        return await call
    attributes = {
        "http.request.method": method,
        "http.route": route,
        "faas.trigger": "http",
        "faas.invoked_name": name,
    }
    errors = {"http_response_status_code": 500}
    with _function_span(state, f"{method} {route}", SpanKind.SERVER, attributes, **errors) as span:
        result = await call
        status = getattr(result, "status_code", None) or (204 if result is None else 200)
        span.set_attribute("http.response.status_code", int(status))
        if int(status) >= 500:
            span.set_status(StatusCode.ERROR)
        return result


async def run_trigger(name: str, trigger: str, attributes: dict[str, Any], call: Awaitable[T]) -> T:
    """Await ``call`` (a queue- or blob-triggered function) inside its CONSUMER span, named
    ``<trigger> <function>`` (``faas.trigger`` ``pubsub`` for a queue, ``datasource`` for a blob)."""
    state = _state
    if state is None:
        return await call
    kind = "pubsub" if trigger == "queue" else "datasource"
    attributes = {"faas.trigger": kind, "faas.invoked_name": name, **attributes}
    with _function_span(state, f"{trigger} {name}", SpanKind.CONSUMER, attributes):
        return await call


async def run_mcp(method: str, target: str, function: str, call: Awaitable[T]) -> T:
    """Await ``call`` (an app MCP function: ``tools/call``, ``resources/read``,
    ``prompts/get``) inside its SERVER span ``mcp {method} {target}``, the child of the
    request's ``traceparent``; a tool error or a refused call marks the span failed."""
    state = _state
    if state is None:
        return await call
    attributes = {"mcp.method.name": method, "faas.trigger": "other", "faas.invoked_name": function}
    with _function_span(state, f"mcp {method} {target}", SpanKind.SERVER, attributes) as span:
        result = await call
        if isinstance(result, dict) and result.get("isError"):
            span.set_attribute("error.type", "tool_error")
            span.set_status(StatusCode.ERROR)
        return result


@contextmanager
def creating_orchestration(start: dict[str, Any], instance_id: str) -> Iterator[None]:
    """Around a start's store write: the ``create_orchestration`` span, child of the current
    context (the request's ``traceparent``), written into ``start`` as ``ParentTraceContext``."""
    state = _state
    if state is None:
        yield
        return
    name = str(start.get("Name") or "")
    with state.tracer.start_as_current_span(
        f"create_orchestration:{name}",
        kind=SpanKind.PRODUCER,
        attributes={
            "durabletask.type": "create_orchestration",
            "durabletask.task.name": name,
            "durabletask.task.instance_id": instance_id,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if span.get_span_context().is_valid:
            start["ParentTraceContext"] = carried(span.get_span_context())
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise


def stamp_signal(request: dict[str, Any]) -> None:
    """An entity operation signalled over HTTP carries the request's trace context."""
    if _state is None:
        return
    current = trace.get_current_span().get_span_context()
    if current.is_valid:
        request["parentTraceContext"] = carried(current)
