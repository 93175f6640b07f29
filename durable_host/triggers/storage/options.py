"""host.json ``extensions.queues`` and ``extensions.blobs``, and the host's own storage settings. Pure.

The extension's (5.x) names, defaults and bounds:

* ``queues.batchSize`` 16 (1-32); ``newBatchThreshold`` default ``batchSize / 2 * cores``;
  ``maxPollingInterval`` ``00:01:00`` (at least 100 ms; a number is milliseconds);
  ``visibilityTimeout`` ``00:00:00`` (the delay before a failed message is tried again);
  ``maxDequeueCount`` 5 (at least 1); ``messageEncoding`` ``base64`` or ``none``.
* ``blobs.maxDegreeOfParallelism`` ``8 * cores`` (at least 1); ``poisonBlobThreshold`` 5.

The host's own (environment or ``local.settings.json``), each because the extension's value
is fixed where a test or a small deployment needs another:

* ``DURABLE_HOST_QUEUE_LEASE_SECONDS`` (default 600, the extension's fixed 10 minutes): how
  long a received message stays invisible while its function runs (renewed at half of it).
  A host killed mid-message leaves it invisible that long before another host runs it.
* ``DURABLE_HOST_BLOB_SCAN_SECONDS`` (default 10): the pause between two scans of a blob
  trigger's container (``blob_trigger``).

``AzureFunctionsJobHost__extensions__queues__<name>`` (and ``__blobs__``) in the environment
overrides host.json, as on the Functions host. A bad value refuses the start with
``StorageConfigError`` naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from durable_host.ops import settings as host_settings
from durable_host.triggers.storage.spec import StorageConfigError

MIN_POLLING = 0.1  # seconds: QueuePollingIntervals.Minimum
MAX_BATCH = 32


@dataclass(frozen=True, slots=True)
class QueueOptions:
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_polling_interval: float = 60.0
    visibility_timeout: float = 0.0
    max_dequeue_count: int = 5
    message_encoding: str = "base64"
    lease_seconds: float = 600.0


@dataclass(frozen=True, slots=True)
class BlobOptions:
    max_degree_of_parallelism: int = 8
    poison_blob_threshold: int = 5
    scan_seconds: float = 10.0


def _timespan(where: str, value: Any, *, millis: bool) -> float:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000 if millis else float(value)
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)", str(value).strip())
    if not match:
        raise StorageConfigError(f"host.json {where}={value!r} is not a time span like 00:00:30")
    days, hours, minutes, secs = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(secs)


def _whole(where: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not re.fullmatch(r"\d+", str(value).strip()):
        raise StorageConfigError(f"host.json {where}={value!r} is not a whole number")
    number = int(str(value).strip())
    if number < low or (high is not None and number > high):
        bound = f"{low} to {high}" if high is not None else f"at least {low}"
        raise StorageConfigError(f"host.json {where}={number} is out of range ({bound})")
    return number


def _section(extensions: Mapping[str, Any], name: str, env: Mapping[str, str]) -> dict[str, Any]:
    found = next((v for k, v in extensions.items() if k.lower() == name), None) or {}
    if not isinstance(found, dict):
        raise StorageConfigError(f"host.json extensions.{name} is not an object")
    section = {k.lower(): v for k, v in found.items()}
    # An app setting overrides host.json, as on the Functions host.
    prefix = f"azurefunctionsjobhost__extensions__{name}__"
    for key, value in env.items():
        if key.lower().startswith(prefix) and value.strip():
            section[key[len(prefix) :].lower()] = value.strip()
    return section


def read(
    host_json: Mapping[str, Any], env: Mapping[str, str], cores: int | None = None
) -> tuple[QueueOptions, BlobOptions]:
    cores = cores or os.cpu_count() or 1
    extensions = host_json.get("extensions") or {}
    queues = _section(extensions, "queues", env)
    known = {
        "batchsize",
        "newbatchthreshold",
        "maxpollinginterval",
        "visibilitytimeout",
        "maxdequeuecount",
        "messageencoding",
    }
    unknown = sorted(set(queues) - known)
    if unknown:
        raise StorageConfigError(f"host.json extensions.queues.{unknown[0]} is not a setting")
    batch = _whole("extensions.queues.batchSize", queues.get("batchsize", 16), 1, MAX_BATCH)
    threshold = queues.get("newbatchthreshold")
    polling = _timespan(
        "extensions.queues.maxPollingInterval",
        queues.get("maxpollinginterval", "00:01:00"),
        millis=True,
    )
    if polling < MIN_POLLING:
        raise StorageConfigError(
            "host.json extensions.queues.maxPollingInterval must not be less than 00:00:00.1"
        )
    encoding = str(queues.get("messageencoding", "base64")).strip().lower()
    if encoding not in ("base64", "none"):
        raise StorageConfigError(
            f"host.json extensions.queues.messageEncoding={encoding!r} is not base64 or none"
        )
    lease = host_settings.seconds(
        env, "DURABLE_HOST_QUEUE_LEASE_SECONDS", 600.0, 2, 7 * 86400, error=StorageConfigError
    )
    queue_options = QueueOptions(
        batch_size=batch,
        new_batch_threshold=(
            batch // 2 * cores
            if threshold is None
            else _whole("extensions.queues.newBatchThreshold", threshold, 0)
        ),
        max_polling_interval=polling,
        visibility_timeout=_timespan(
            "extensions.queues.visibilityTimeout",
            queues.get("visibilitytimeout", "00:00:00"),
            millis=False,
        ),
        max_dequeue_count=_whole(
            "extensions.queues.maxDequeueCount", queues.get("maxdequeuecount", 5), 1
        ),
        message_encoding=encoding,
        lease_seconds=lease,
    )
    blobs = _section(extensions, "blobs", env)
    unknown = sorted(set(blobs) - {"maxdegreeofparallelism", "poisonblobthreshold"})
    if unknown:
        raise StorageConfigError(f"host.json extensions.blobs.{unknown[0]} is not a setting")
    blob_options = BlobOptions(
        max_degree_of_parallelism=_whole(
            "extensions.blobs.maxDegreeOfParallelism",
            blobs.get("maxdegreeofparallelism", 8 * cores),
            1,
        ),
        poison_blob_threshold=_whole(
            "extensions.blobs.poisonBlobThreshold", blobs.get("poisonblobthreshold", 5), 1
        ),
        scan_seconds=_scan_seconds(env),
    )
    return queue_options, blob_options


def _scan_seconds(env: Mapping[str, str]) -> float:
    text = env.get("DURABLE_HOST_BLOB_SCAN_SECONDS", "").strip()
    if not text:
        return 10.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise StorageConfigError(
            f"DURABLE_HOST_BLOB_SCAN_SECONDS={text[:40]!r} is not a number of seconds from 0.1"
            " to 3600"
        )
    return value
