"""The OpenTelemetry SDK as the standard ``OTEL_*`` settings describe it. IO (exporters).

``build(environ)`` returns the providers to install, or None when telemetry is off:

* ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` name the exporters (``otlp``,
  ``console``, ``none``, or a comma list). Unset, a signal is off unless an OTLP endpoint is
  set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or the signal's own), which asks for the exporter the
  specification defaults to; the specification's default of ``otlp`` without an endpoint
  would send to a collector nobody started.
* ``OTEL_SDK_DISABLED=true`` turns both off.
* OTLP is sent over HTTP (``http/protobuf``); ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` is refused
  rather than ignored. The exporter reads the rest itself (``OTEL_EXPORTER_OTLP_HEADERS``,
  ``..._TIMEOUT``, ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``).
* The resource reads ``OTEL_SERVICE_NAME`` (default ``durable-host``) and
  ``OTEL_RESOURCE_ATTRIBUTES``.
* The console exporters write one JSON object per line to stdout, or appended to the file
  ``DURABLE_HOST_TELEMETRY_FILE``.

A setting this host cannot honour raises ``ConfigError`` (the host then stops in one line).
Spans go through a batch processor, metrics through a periodic reader; ``Setup.shutdown``
flushes both, for at most ``SHUTDOWN_TIMEOUT`` seconds. Span ids are random except for the one span a caller pins with ``pinned``
(an orchestration's own span, whose id is a hash of its instance and execution ids).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from durable_host.functions.config import ConfigError

log = logging.getLogger("durable_host.telemetry")
FILE_SETTING = "DURABLE_HOST_TELEMETRY_FILE"
EXPORTERS = ("otlp", "console")
SHUTDOWN_TIMEOUT = 5.0  # seconds the host's stop waits for the exporters to flush
pinned: ContextVar[tuple[int, int] | None] = ContextVar("durable_pinned_ids", default=None)


class PinnableIds(RandomIdGenerator):
    """Random ids, except while ``pinned`` holds (trace id, span id) for the next span."""

    def generate_span_id(self) -> int:
        ids = pinned.get()
        return ids[1] if ids else super().generate_span_id()

    def generate_trace_id(self) -> int:
        ids = pinned.get()
        return ids[0] if ids else super().generate_trace_id()


@dataclass
class Setup:
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    out: IO[str] | None
    description: str

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Flush and stop both providers at once, for at most ``timeout`` seconds: an OTLP
        exporter retries an unreachable collector with back-off, which must not hold up the
        stop of the host for long (what is not sent by then is dropped, and logged)."""
        deadline = time.monotonic() + timeout
        threads = [
            threading.Thread(target=_shutdown, args=(p,), name="telemetry-stop", daemon=True)
            for p in (self.tracer_provider, self.meter_provider)
            if p is not None
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            log.warning("telemetry not flushed within %.0fs; the rest is dropped", timeout)
        elif self.out is not None and self.out is not sys.stdout:
            self.out.close()


def _shutdown(provider: TracerProvider | MeterProvider) -> None:
    try:
        provider.shutdown()
    except Exception:  # a collector that is down must not stop a stop
        log.warning("telemetry exporter did not shut down cleanly", exc_info=True)


def exporters(environ: Mapping[str, str], signal: str) -> list[str]:
    """The exporters named for ``signal`` (``traces`` or ``metrics``); [] means off."""
    if (environ.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return []
    upper = signal.upper()
    named = (environ.get(f"OTEL_{upper}_EXPORTER") or "").strip().lower()
    if not named:
        endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
        named = "otlp" if any((environ.get(e) or "").strip() for e in endpoints) else ""
    chosen = [name.strip() for name in named.split(",") if name.strip() not in ("", "none")]
    unknown = [name for name in chosen if name not in EXPORTERS]
    if unknown:
        raise ConfigError(
            f"OTEL_{upper}_EXPORTER: {', '.join(unknown)} is not an exporter this host has"
            f" ({', '.join(EXPORTERS)}, none)"
        )
    protocol = environ.get(f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if "otlp" in chosen and protocol and protocol.strip() != "http/protobuf":
        raise ConfigError(
            f"OTLP protocol {protocol.strip()!r}: this host sends OTLP over HTTP; set"
            " OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the collector's HTTP port (4318)"
        )
    return chosen


def build(
    environ: Mapping[str, str],
    span_exporter: SpanExporter | None = None,
    metric_reader: Any = None,
) -> Setup | None:
    """The providers ``environ`` asks for (see the module); ``span_exporter`` and
    ``metric_reader`` replace the configured ones (tests in-process). None: off."""
    span_names, metric_names = exporters(environ, "traces"), exporters(environ, "metrics")
    if span_exporter is None and metric_reader is None and not span_names and not metric_names:
        return None
    out = _console_out(environ) if "console" in span_names + metric_names else None
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "durable-host"})
    tracer_provider = meter_provider = None
    if span_exporter is not None or span_names:
        tracer_provider = TracerProvider(resource=resource, id_generator=PinnableIds())
        chosen = [span_exporter] if span_exporter else [_spans(n, out) for n in span_names]
        for exporter in chosen:
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    if metric_reader is not None or metric_names:
        readers = (
            [metric_reader]
            if metric_reader is not None
            else [PeriodicExportingMetricReader(_metrics(name, out)) for name in metric_names]
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    where = (environ.get(FILE_SETTING) or "stdout") if out is not None else None
    description = (
        f"telemetry on: traces {','.join(span_names) or '-'}, metrics"
        f" {','.join(metric_names) or '-'}" + (f" (console to {where})" if where else "")
    )
    return Setup(tracer_provider, meter_provider, out, description)


def _console_out(environ: Mapping[str, str]) -> IO[str]:
    path = environ.get(FILE_SETTING)
    return open(path, "a", encoding="utf-8", buffering=1) if path else sys.stdout


def _spans(name: str, out: IO[str] | None) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter(out=out or sys.stdout, formatter=_json_line)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(f"the OTLP exporter is not installed ({_OTLP_PACKAGE})") from exc
    return OTLPSpanExporter()


def _metrics(name: str, out: IO[str] | None) -> Any:
    if name == "console":
        return ConsoleMetricExporter(out=out or sys.stdout, formatter=_json_line)
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError as exc:
        raise ConfigError(f"the OTLP exporter is not installed ({_OTLP_PACKAGE})") from exc
    return OTLPMetricExporter()


_OTLP_PACKAGE = "pip install opentelemetry-exporter-otlp-proto-http"


def _json_line(item: Any) -> str:
    return item.to_json(indent=None) + "\n"
