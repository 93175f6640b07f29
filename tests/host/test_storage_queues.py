"""The queue trigger on real hosts against Azurite: the message's fields, delete after success,
the poison queue after ``maxDequeueCount``, base64 and plain encodings, two hosts on one queue
(each message once), and a host SIGKILLed mid-message (the message runs again elsewhere and
completes; nothing is lost). The test app's host.json: maxDequeueCount 3, visibilityTimeout 0,
maxPollingInterval 1 s; its leases are 3 s (``DURABLE_HOST_QUEUE_LEASE_SECONDS``)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tests.harness import HostProcess, wait_for
from tests.host.storage_support import APP, Account, as_json, env, unique


def test_a_message_arrives_with_its_fields_is_deleted_after_success_or_poisoned(
    make_host, storage_account: str, tmp_path: Path
) -> None:
    account = Account(storage_account)
    marks = tmp_path / "marks"
    marks.mkdir()
    spans = tmp_path / "spans.jsonl"
    traced = {
        "OTEL_TRACES_EXPORTER": "console",
        "DURABLE_HOST_TELEMETRY_FILE": str(spans),
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    settings = env(storage_account, STORAGE_TEST_MARKS=str(marks), **traced)
    jobs, failing = settings["JOBS_QUEUE"], settings["FAILING_QUEUE"]  # this test's own
    host = make_host(APP, env=settings)
    host.start()
    name, payload = unique(), unique("bad")
    account.send(jobs, json.dumps({"name": name, "text": "x"}))
    account.send(failing, payload)

    seen = as_json(account.wait_blob("results", f"{name}.json"))

    assert seen["body"] == {"name": name, "text": "x"} and seen["dequeue_count"] == 1
    assert seen["id"] and seen["pop_receipt"]
    inserted = datetime.fromisoformat(seen["insertion_time"])
    assert datetime.fromisoformat(seen["expiration_time"]) > inserted
    wait_for(lambda: account.length(jobs) == 0, 30, "the message to be deleted")
    scale = host.get("/admin/host/scale").json()
    assert {"function": "on_job", "queue": jobs, "length": 0, "oldestAgeSeconds": None} in scale[
        "queues"
    ]
    # The invocation ran in its CONSUMER span.
    found = wait_for(
        lambda: (
            [
                json.loads(line)
                for line in (spans.read_text() if spans.exists() else "").splitlines()
                if "queue on_job" in line
            ]
            or None
        ),
        30,
        "the queue functions' spans",
    )
    assert {s["kind"] for s in found} == {"SpanKind.CONSUMER"}
    assert found[0]["attributes"]["faas.invoked_name"] == "on_job"
    # The failing message: tried maxDequeueCount (3) times, then moved to <queue>-poison.
    wait_for(lambda: payload in account.messages(f"{failing}-poison"), 60, "the poison message")
    tries = sorted(p.name for p in marks.iterdir() if payload in p.name)
    assert tries == [f"failing-{payload}-{n}" for n in (1, 2, 3)]
    assert payload not in account.messages(failing)


def test_plain_messages_with_message_encoding_none(make_host, storage_account: str) -> None:
    account = Account(storage_account)
    queue = unique("plain-")
    settings = env(
        storage_account,
        PLAIN_QUEUE=queue,
        AzureFunctionsJobHost__extensions__queues__messageEncoding="none",
    )
    make_host(APP, env=settings).start()
    # The queue's name makes the text this test's own: the run on the other store shares the
    # account and its "results" container.
    text = f"not base64 at all: ü {queue}"

    account.send(queue, text, encoding="none")

    found = wait_for(
        lambda: [
            name
            for name in account.names("results", "plain-")
            if account.blob("results", name) == text.encode()
        ],
        30,
        "the plain message's blob",
    )
    assert len(found) == 1


def test_two_hosts_share_a_queue_and_run_each_message_once(make_host, storage_account: str) -> None:
    account = Account(storage_account)
    # At most two messages in flight per host (batchSize 2, newBatchThreshold 0), each 0.3 s:
    # one host cannot drain the queue before the other polls (at least once a second).
    settings = env(
        storage_account,
        AzureFunctionsJobHost__extensions__queues__batchSize="2",
        AzureFunctionsJobHost__extensions__queues__newBatchThreshold="0",
    )
    hosts = [make_host(APP, env=settings, name=f"h{i}").start() for i in range(2)]
    names = [unique("m") for _ in range(12)]
    for name in names:
        account.send(settings["SLOW_QUEUE"], json.dumps({"name": name, "sleep": 0.3}))

    results = [as_json(account.wait_blob("results", f"slow-{n}.json", 60)) for n in names]

    runs = [r for r in account.runs("slow") if r["name"] in names]
    assert sorted(r["name"] for r in runs) == sorted(names)  # each exactly once
    assert {r["try"] for r in results} == {1}
    pids = {h.process.pid for h in hosts if h.process is not None}
    assert {r["pid"] for r in results} == pids  # both hosts took messages


def test_a_host_killed_mid_message_loses_nothing(
    make_host, storage_account: str, tmp_path: Path
) -> None:
    account = Account(storage_account)
    marks = tmp_path / "marks"
    marks.mkdir()
    settings = env(storage_account, STORAGE_TEST_MARKS=str(marks))
    first: HostProcess = make_host(APP, env=settings).start()
    name = unique("k")
    account.send(settings["SLOW_QUEUE"], json.dumps({"name": name, "sleep": 60}))
    wait_for(lambda: (marks / f"slow-{name}-1").exists(), 30, "the first try to start")

    first.kill()  # SIGKILL while the function runs: nothing was deleted
    make_host(APP, env=settings).start()

    result = as_json(account.wait_blob("results", f"slow-{name}.json", 60))
    assert result["try"] == 2  # the message came back after its lease and ran again
    assert [r["name"] for r in account.runs("slow")].count(name) == 1
    wait_for(lambda: account.length(settings["SLOW_QUEUE"]) == 0, 30, "the message to be deleted")
