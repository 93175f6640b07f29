"""The Storage extension's pure parts: binding expressions, blob path patterns, host.json
``extensions.queues`` / ``blobs`` with their defaults and bounds, the polling back-off, the
poison queue's name and message encodings."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from durable_host.triggers.storage import expressions as ex
from durable_host.triggers.storage import options
from durable_host.triggers.storage.binder import decode_message, encode_message
from durable_host.triggers.storage.queue_trigger import Backoff, poison_queue_name
from durable_host.triggers.storage.spec import StorageConfigError

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def resolve(text: str, data: dict) -> str:
    return ex.resolve(text, data, now=lambda: NOW, new_id=lambda: "guid")


def test_expressions_from_each_source() -> None:
    data = {"name": "a", "Query": {"x": "1"}, "mcptoolargs": {"snippet": "s1"}, "n": 3}
    assert resolve("c/{name}-{NAME}-{n}.txt", data) == "c/a-a-3.txt"  # case-insensitive
    assert resolve("{query.x}/{mcptoolargs.snippet}", data) == "1/s1"  # dotted: the MCP hook
    assert resolve("{DateTime}/{rand-guid}", {}) == "2026-03-04T05-06-07Z/guid"
    assert ex.resolve_settings("%A%/{b}", {"A": "x"}) == "x/{b}"
    with pytest.raises(KeyError):
        ex.resolve_settings("%Missing%", {})
    with pytest.raises(ex.ExpressionError, match="No value for named parameter 'nope'."):
        resolve("{nope}", data)


def test_blob_path_patterns_capture_names_across_folders() -> None:
    pattern = ex.pattern("{name}.txt")
    assert pattern.match("a/b.txt").groupdict() == {"name": "a/b"}  # type: ignore[union-attr]
    assert pattern.match("b.json") is None
    two = ex.pattern("in/{stem}.{ext}")
    assert two.match("in/report.v2.pdf").groupdict() == {"stem": "report", "ext": "v2.pdf"}  # type: ignore[union-attr]
    assert ex.literal_prefix("in/{stem}.{ext}") == "in/"
    with pytest.raises(ValueError):
        ex.pattern("{a}/{a}")


def test_queue_and_blob_options_defaults_and_bounds() -> None:
    queues, blobs = options.read({}, {}, cores=2)
    assert (queues.batch_size, queues.new_batch_threshold, queues.max_polling_interval) == (
        16,
        16,  # batchSize / 2 * cores
        60.0,
    )
    assert (queues.visibility_timeout, queues.max_dequeue_count, queues.message_encoding) == (
        0.0,
        5,
        "base64",
    )
    assert (blobs.max_degree_of_parallelism, blobs.poison_blob_threshold) == (16, 5)
    host_json = {"extensions": {"queues": {"maxPollingInterval": 2000, "batchSize": 4}}}
    queues, _ = options.read(host_json, {}, cores=2)
    assert (queues.max_polling_interval, queues.new_batch_threshold) == (2.0, 4)
    override = {"AzureFunctionsJobHost__extensions__queues__messageEncoding": "none"}
    assert options.read({}, override)[0].message_encoding == "none"
    for bad, where in [
        ({"queues": {"batchSize": 33}}, "batchSize"),
        ({"queues": {"maxPollingInterval": "00:00:00.05"}}, "maxPollingInterval"),
        ({"queues": {"messageEncoding": "utf8"}}, "messageEncoding"),
        ({"queues": {"maxDequeueCount": 0}}, "maxDequeueCount"),
        ({"queues": {"batchsise": 1}}, "batchsise"),
        ({"blobs": {"poisonBlobThreshold": "x"}}, "poisonBlobThreshold"),
    ]:
        with pytest.raises(StorageConfigError, match=where):
            options.read({"extensions": bad}, {})


def test_backoff_grows_towards_the_maximum_and_a_message_resets_it() -> None:
    backoff = Backoff(2.0, rng=random.Random(1))
    waits = [backoff.next(False) for _ in range(8)]
    assert waits[0] == pytest.approx(0.1) and waits == sorted(waits) and waits[-1] == 2.0
    assert backoff.next(True) == pytest.approx(0.1)


def test_poison_queue_names_and_message_encodings() -> None:
    assert poison_queue_name("jobs") == "jobs-poison"
    assert poison_queue_name("jobs-poison") is None
    assert poison_queue_name("q" * 60) is None
    assert encode_message("héllo", "base64") == "aMOpbGxv"
    assert decode_message("aMOpbGxv", "base64") == "héllo"
    assert decode_message("/w==", "base64") == b"\xff"  # not UTF-8: bytes
    assert encode_message(b"plain", "none") == "plain"
    with pytest.raises(ValueError):
        decode_message("not base64!", "base64")
