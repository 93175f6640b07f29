"""Spans and metrics of the agent's own work: model calls and tool calls. IO (telemetry).

The app depends on ``opentelemetry-api`` only, the library half of OpenTelemetry: until the
process that runs the app configures an SDK, every call here is a no-op. The durable host
configures one from the ``OTEL_*`` settings; on Azure, the Functions host's OpenTelemetry
mode with a distro (``docs/telemetry.md``). The spans join whatever span is current - the
activity's own span on the durable host - so they land in the trace of the submission.

Spans are made only in activities, which run once per execution; never in orchestrator code,
which replays from the start on every episode and would repeat them.

Contract:

* ``model_call(job, model)`` - around one request to the model (or the offline planner):
  span ``chat {model}`` with the GenAI attributes ``gen_ai.operation.name`` (``chat``),
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``, and on failure
  ``error.type`` (the envelope's kind: ``rate_limited``, ``transient``, ``timeout``,
  ``fatal``). Metrics: the histogram ``gen_ai.client.operation.duration`` (seconds) and the
  counter ``agent.model.tokens`` (``gen_ai.token.type`` ``input`` | ``output``), both labelled
  by ``gen_ai.request.model``. A reply reused from the attempt ledger is no model call: no span.
* ``tool_call(job)`` - around one ``execute_tool`` run: span ``execute_tool {name}`` with
  ``gen_ai.tool.name``, ``agent.tool_task_id``, ``agent.tool.outcome`` (``done``,
  ``interrupted``, ``leased``, ``reused``), ``agent.tool.ok``, ``agent.tool.result_kind`` and
  ``agent.tool.runs``.
* Both carry ``agent.session_id``, ``agent.submission_id`` and ``agent.round`` (``{n}`` or
  ``{n}.{k}`` for an operator retry).

Never recorded: prompts, replies, tool arguments or results, error messages, settings (a key
can hide in any of them). Only ids, names, counts, kinds and durations.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, StatusCode

SCOPE = "durable_agent_kernel"
_tracer = trace.get_tracer(SCOPE)  # proxies: they follow the SDK a host installs later
_meter = metrics.get_meter(SCOPE)
_duration = _meter.create_histogram(
    "gen_ai.client.operation.duration", unit="s", description="one model call, by model"
)
_tokens = _meter.create_counter(
    "agent.model.tokens", unit="{token}", description="prompt and completion tokens, by model"
)


def model_round(attempt_key: str) -> tuple[str | None, str | None]:
    """(round, model attempt) from ``{nonce}:{submission}:model:{round}.{k}:{attempt}``."""
    _, found, rest = attempt_key.partition(":model:")
    if not found:
        return None, None
    round_, _, attempt = rest.partition(":")
    number, _, retry = round_.partition(".")
    # The operator's first try is ``.1``; the round's own id names only later ones.
    return (number if retry in ("", "1") else round_) or None, attempt or None


def tool_round(tool_task_id: str) -> str | None:
    """The round from ``{submission}:tool:{round}:{call}``."""
    parts = tool_task_id.split(":")
    return parts[-2] if len(parts) >= 4 and parts[-3] == "tool" else None


def _ids(job: dict[str, Any], round_: str | None) -> dict[str, Any]:
    found = {
        "agent.session_id": job.get("session_id"),
        "agent.submission_id": job.get("submission_id"),
        "agent.round": round_,
    }
    return {k: str(v) for k, v in found.items() if v}


@dataclass(slots=True)
class ModelCall:
    span: Span
    model: str
    began: float

    def record(self, result: dict[str, Any]) -> None:
        """Record a ``kernel.turn.model_io`` envelope: usage and model, or the failure's kind."""
        labels = {"gen_ai.operation.name": "chat", "gen_ai.request.model": self.model}
        if result.get("ok"):
            response = result.get("response") or {}
            usage = response.get("usage") or {}
            prompt = int(usage.get("prompt_tokens") or 0)
            completion = int(usage.get("completion_tokens") or 0)
            if response.get("model"):
                self.span.set_attribute("gen_ai.response.model", str(response["model"]))
            self.span.set_attribute("gen_ai.usage.input_tokens", prompt)
            self.span.set_attribute("gen_ai.usage.output_tokens", completion)
            if response.get("finish_reason"):
                self.span.set_attribute(
                    "gen_ai.response.finish_reasons", [str(response["finish_reason"])]
                )
            _tokens.add(prompt, {**labels, "gen_ai.token.type": "input"})
            _tokens.add(completion, {**labels, "gen_ai.token.type": "output"})
        else:
            labels["error.type"] = str(result.get("kind") or "error")
            self.span.set_attribute("error.type", labels["error.type"])
            self.span.set_status(StatusCode.ERROR)
        _duration.record(time.perf_counter() - self.began, labels)


@contextmanager
def model_call(job: dict[str, Any], model: str) -> Iterator[ModelCall]:
    """The span of one model call for the ``call_model`` job ``job`` (see the module)."""
    round_, attempt = model_round(str(job.get("attempt_key") or ""))
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        **_ids(job, round_),
    }
    if attempt:
        attributes["agent.model.attempt"] = attempt
    with _span(f"chat {model}", attributes, trace.SpanKind.CLIENT) as span:
        yield ModelCall(span, model, time.perf_counter())


@dataclass(slots=True)
class ToolCall:
    span: Span

    def record(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Record an ``execute_tool`` answer's outcome; returns ``answer``."""
        outcome = "reused" if answer.get("reused") else str(answer.get("status") or "")
        self.span.set_attribute("agent.tool.outcome", outcome)
        result = answer.get("result")
        if isinstance(result, dict):
            self.span.set_attribute("agent.tool.ok", bool(result.get("ok")))
            if result.get("kind"):
                self.span.set_attribute("agent.tool.result_kind", str(result["kind"]))
        if isinstance(answer.get("runs"), int):
            self.span.set_attribute("agent.tool.runs", answer["runs"])
        return answer


@contextmanager
def tool_call(job: dict[str, Any]) -> Iterator[ToolCall]:
    """The span of one ``execute_tool`` run for the job ``job`` (see the module)."""
    name = str(job.get("name") or "")
    task_id = str(job.get("tool_task_id") or "")
    submission = task_id.split(":tool:")[0] if ":tool:" in task_id else None
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "agent.tool_task_id": task_id,
        **_ids({**job, "submission_id": submission}, tool_round(task_id)),
    }
    with _span(f"execute_tool {name}", attributes) as span:
        yield ToolCall(span)


@contextmanager
def _span(
    name: str, attributes: dict[str, Any], kind: trace.SpanKind = trace.SpanKind.INTERNAL
) -> Iterator[Span]:
    """A current span that records an exception by its type only: its message may quote a
    prompt, an argument or a key."""
    with _tracer.start_as_current_span(
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
            span.set_status(StatusCode.ERROR)
            raise
