"""Structured host logs: every record says which instance it concerns.

``instance`` is a context variable the engine sets while it works on an instance (an
episode, an entity batch, an activity). asyncio tasks and ``asyncio.to_thread`` copy the
context, and so do the threads that run sync activities, so records logged by the app's
own code inside an orchestrator, entity or activity carry the instance id too.
``configure`` installs one stderr handler with a text format
(``time level logger [instance] message``) or one JSON object per line.

Replay: orchestrator code runs again from the start on every episode. The SDK's
``context.is_replaying`` is true while it re-runs the past, so app code that logs only
``if not context.is_replaying`` - the replay-safe logging the Durable docs prescribe -
prints each line once; the host keeps that flag exact (a test pins it).
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar

instance: ContextVar[str] = ContextVar("durable_instance", default="-")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(instance_id)s] %(message)s"


class InstanceFilter(logging.Filter):
    """Adds ``instance_id`` to every record (from ``extra`` or the current context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "instance_id"):
            record.instance_id = instance.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "instance_id": getattr(record, "instance_id", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(InstanceFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
