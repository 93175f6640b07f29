"""Bad input to every management endpoint: a clear 4xx, a JSON (or empty) body, nothing stored.

One table of requests against the basic app's shared host. After each one the test checks
that no instance was created, the waiting instance it aimed at is untouched, and the host
still answers. The status codes are the extension's where it defines one.
"""

from __future__ import annotations

import json

import pytest

from tests.harness import WEBHOOK

BIG = b'"' + b"x" * (17 * 1024 * 1024) + b'"'
DEEP = b"[" * 200_000 + b"]" * 200_000  # once a RecursionError and a 500
JUST_TOO_DEEP = b"[" * 65 + b"]" * 65
RUNNING = "bad-input-target"
UNKNOWN = "nobody-never-started"  # fixed: parametrized ids must be the same in every process

# (method, path, raw body, content type, expected status, expected body: "json", "empty" or a text)
CASES = [
    (
        "POST",
        "/orchestrators/hello_sequence/bm-1",
        b"{bad",
        "application/json",
        400,
        "Invalid JSON content",
    ),
    ("POST", "/orchestrators/hello_sequence/bm-2", BIG, "application/json", 413, "json"),
    ("POST", "/orchestrators/no_such_orchestrator/bm-3", None, None, 400, "doesn't exist"),
    (
        "POST",
        "/orchestrators/hello_sequence/bm-6",
        DEEP,
        "application/json",
        400,
        "deeper than 64 levels",
    ),
    (
        "POST",
        "/orchestrators/hello_sequence/bm-7",
        JUST_TOO_DEEP,
        "application/json",
        400,
        "deeper than 64",
    ),
    ("POST", "/orchestrators/hello_sequence/bm-8", b'{"a": NaN}', "application/json", 400, "NaN"),
    (
        "POST",
        "/orchestrators/hello_sequence/bm-9",
        b"[1e999]",
        "application/json",
        400,
        "out of range",
    ),
    (
        "POST",
        "/orchestrators/hello_sequence/bm-10",
        b'"\xed\xa0\x80"',
        "application/json",
        400,
        "Invalid JSON",
    ),
    ("POST", "/orchestrators/hello_sequence/bm%01ctl", None, None, 400, "Instance ID"),
    ("POST", "/orchestrators/hello_sequence/" + "b" * 257, None, None, 400, "Instance ID"),
    ("POST", "/orchestrators/hello_sequence/%40bm", None, None, 400, "Instance ID"),
    (
        "POST",
        "/orchestrators/hello_sequence/bm-4?timeout=soon&pollingInterval=1",
        None,
        None,
        400,
        "timeout",
    ),
    ("GET", "/orchestrators/hello_sequence/bm-5", None, None, 404, "json"),
    (
        "POST",
        f"/instances/{RUNNING}/raiseEvent/approve",
        b"{bad",
        "application/json",
        400,
        "Invalid JSON content",
    ),
    (
        "POST",
        f"/instances/{RUNNING}/raiseEvent/approve",
        b"yes",
        "text/plain",
        400,
        "Only application/json",
    ),
    ("POST", f"/instances/{RUNNING}/raiseEvent/approve", BIG, "application/json", 413, "json"),
    (
        "POST",
        f"/instances/{RUNNING}/raiseEvent/approve",
        DEEP,
        "application/json",
        400,
        "deeper than 64",
    ),
    ("POST", f"/instances/{UNKNOWN}/raiseEvent/approve", b"1", "application/json", 404, "json"),
    ("POST", f"/instances/{UNKNOWN}/terminate", None, None, 404, "json"),
    ("POST", f"/instances/{UNKNOWN}/suspend", None, None, 404, "json"),
    ("POST", f"/instances/{UNKNOWN}/resume", None, None, 404, "json"),
    ("POST", f"/instances/{UNKNOWN}/rewind", None, None, 404, "No orchestration with instance ID"),
    ("POST", f"/instances/{RUNNING}/rewind", None, None, 412, "only orchestrations in the"),
    ("POST", f"/instances/{UNKNOWN}/restart", None, None, 400, "InstanceId does not match"),
    (
        "POST",
        f"/instances/{RUNNING}/restart?restartWithNewInstanceId=maybe",
        None,
        None,
        400,
        "restartWithNewInstanceId",
    ),
    (
        "POST",
        f"/instances/{RUNNING}/restart?restartWithNewInstanceId=false",
        None,
        None,
        409,
        "already exists",
    ),
    ("POST", f"/instances/{RUNNING}/frobnicate", None, None, 404, "json"),
    ("PUT", f"/instances/{RUNNING}", b"{}", "application/json", 404, "json"),
    ("GET", f"/instances/{UNKNOWN}", None, None, 404, "empty"),
    ("GET", f"/instances/{RUNNING}?showHistory=maybe", None, None, 400, "showHistory"),
    ("GET", "/instances?top=many", None, None, 400, "top"),
    (
        "GET",
        "/instances?top=99999999999999999999999",
        None,
        None,
        400,
        "top",
    ),  # once an OverflowError
    ("GET", "/instances?top=-1", None, None, 400, "top"),
    ("GET", "/entities/counter?top=99999999999999999999999", None, None, 400, "top"),
    ("GET", "/instances?runtimeStatus=Running,Sleeping", None, None, 400, "Sleeping"),
    ("GET", "/instances?createdTimeFrom=yesterday", None, None, 400, "yesterday"),
    (
        "DELETE",
        "/instances",
        None,
        None,
        400,
        "Please provide value for 'createdTimeFrom' parameter.",
    ),
    ("DELETE", "/instances?createdTimeFrom=not-a-date", None, None, 400, "not-a-date"),
    (
        "DELETE",
        f"/instances/{RUNNING}",
        None,
        None,
        412,
        "Only orchestrations in a terminal state can be purged",
    ),
    ("DELETE", f"/instances/{UNKNOWN}", None, None, 404, "empty"),
    ("POST", "/entities/counter/bm?op=add", b"{bad", "application/json", 400, "not valid JSON"),
    ("POST", "/entities/counter/bm?op=add", BIG, "application/json", 413, "json"),
    ("POST", "/entities/counter/bm?op=add", DEEP, "application/json", 400, "deeper than 64"),
    ("POST", "/entities/counter/bm?op=add", b"[Infinity]", "application/json", 400, "Infinity"),
    ("POST", "/entities/counter/bm", b"1", "application/json", 400, "operation"),
    (
        "POST",
        "/entities/counter/bm" + "k" * 300 + "?op=add",
        b"1",
        "application/json",
        400,
        "entity key must be at most 247",
    ),
    ("GET", "/entities/counter/bm" + "k" * 300, None, None, 400, "entity key"),
    ("POST", "/entities/" + "n" * 129 + "/bm?op=add", b"1", "application/json", 400, "entity name"),
    (
        "POST",
        "/entities/counter/bm?op=" + "o" * 257,
        b"1",
        "application/json",
        400,
        "entity operation",
    ),
    ("POST", "/entities/no_such_entity/bm?op=add", b"1", "application/json", 404, "json"),
    ("GET", f"/entities/counter/{UNKNOWN}", None, None, 404, "empty"),
    ("GET", "/no/such/route", None, None, 404, "json"),
]


@pytest.fixture(scope="module")
def target(shared_host) -> str:
    shared_host.start_orchestration("approval", instance_id=RUNNING)
    shared_host.wait_for_status(RUNNING, ("Running",))
    return RUNNING


def names(host, prefix: str) -> list[str]:
    return [
        s["instanceId"] for s in host.get(f"{WEBHOOK}/instances?instanceIdPrefix={prefix}").json()
    ]


@pytest.mark.parametrize(
    ("method", "path", "raw", "content_type", "code", "expected"),
    CASES,
    ids=[f"{c[0]} {c[1][:50]} {c[3] or ''} {len(c[2] or b'')}b" for c in CASES],
)
def test_bad_input_gets_a_clear_4xx_and_changes_nothing(
    shared_host, target, method, path, raw, content_type, code, expected
):
    headers = {"Content-Type": content_type} if content_type else {}

    resp = shared_host.request(method, WEBHOOK + path, raw=raw, headers=headers)

    assert resp.status == code, resp.body[:300]
    if expected == "empty":
        assert resp.body == b""
    else:
        body = json.loads(resp.body)  # every answer is JSON: the SDK parses them all
        if expected != "json":
            assert expected in json.dumps(body)
    assert names(shared_host, "bm") == []
    assert names(shared_host, "@counter@bm") == []
    status = shared_host.status(target)
    assert status["runtimeStatus"] == "Running" and status["output"] is None


def test_the_host_is_still_up_and_the_target_still_works(shared_host, target):
    assert shared_host.get("/admin/host/status").json()["state"] == "Running"

    shared_host.post(f"{WEBHOOK}/instances/{target}/raiseEvent/approve", "finally")

    assert shared_host.wait_for_status(target)["output"] == {"approved": "finally"}
