"""The management API, the SDK client calls and the app's HTTP functions, over real HTTP."""

from __future__ import annotations

import urllib.parse
import uuid

import pytest

from tests.harness import WEBHOOK


def test_admin_status_reports_running(shared_host):
    resp = shared_host.get("/admin/host/status")

    assert resp.status == 200 and resp.json()["state"] == "Running"


def test_start_answers_202_with_check_status_links_and_headers(shared_host):
    resp = shared_host.post(f"{WEBHOOK}/orchestrators/hello_sequence", {"x": 1})

    body = resp.json()
    assert resp.status == 202
    assert resp.headers["Location"] == body["statusQueryGetUri"]
    assert resp.headers["Retry-After"] == "10"
    assert set(body) >= {
        "id",
        "sendEventPostUri",
        "terminatePostUri",
        "purgeHistoryDeleteUri",
        "suspendPostUri",
    }
    status = shared_host.wait_for_status(body["id"])
    assert status["input"] == {"x": 1}  # stored verbatim


def test_status_of_a_running_instance_is_202_with_location_and_retry_after(shared_host):
    instance = shared_host.start_orchestration("approval")

    resp = shared_host.get(f"{WEBHOOK}/instances/{instance}")

    assert resp.status == 202 and resp.headers["Retry-After"] == "5"
    assert resp.json()["runtimeStatus"] in ("Pending", "Running")
    assert resp.json()["createdTime"].endswith("Z")


def test_unknown_instance_status_is_404_with_no_body(shared_host):
    resp = shared_host.get(f"{WEBHOOK}/instances/nope-{uuid.uuid4()}")

    assert resp.status == 404 and resp.body == b""


def test_start_with_timeout_waits_for_the_output(shared_host):
    resp = shared_host.post(
        f"{WEBHOOK}/orchestrators/hello_sequence?timeout=10&pollingInterval=0.1"
    )

    assert resp.status == 200 and resp.json() == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def test_sdk_wait_for_completion_returns_the_output(shared_host):
    resp = shared_host.post("/api/wait/hello_sequence")

    assert resp.status == 200 and resp.json() == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def test_sdk_client_check_status_uses_the_request_origin(shared_host):
    resp = shared_host.post("/api/orchestrators/hello_sequence")

    assert resp.status == 202
    assert resp.json()["statusQueryGetUri"].startswith(shared_host.base_url + WEBHOOK)


def test_sdk_get_status_of_unknown_instance_is_falsy(shared_host):
    resp = shared_host.get(f"/api/status/unknown-{uuid.uuid4().hex}")

    assert resp.status == 404 and resp.json() == {"found": False}


def test_sdk_get_status_reports_completion(shared_host):
    instance = shared_host.start_orchestration("hello_sequence")
    shared_host.wait_for_status(instance)

    assert shared_host.get(f"/api/status/{instance}").json()["status"] == "Completed"


def test_terminate_then_410_for_a_finished_instance(shared_host):
    instance = shared_host.start_orchestration("approval")

    first = shared_host.post(f"{WEBHOOK}/instances/{instance}/terminate?reason=stop%20it")
    status = shared_host.wait_for_status(instance)
    second = shared_host.post(f"{WEBHOOK}/instances/{instance}/terminate?reason=again")
    event = shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/approve", {})

    assert first.status == 202
    assert status["runtimeStatus"] == "Terminated" and status["output"] == "stop it"
    assert second.status == 410 and event.status == 410


def test_terminate_through_the_sdk_client(shared_host):
    instance = shared_host.start_orchestration("approval")

    assert shared_host.post(f"/api/terminate/{instance}").status == 202
    assert shared_host.wait_for_status(instance)["output"] == "by test"


@pytest.mark.parametrize("action", ["raiseEvent/x", "terminate", "suspend", "resume"])
def test_actions_on_unknown_instances_are_404(shared_host, action):
    resp = shared_host.post(f"{WEBHOOK}/instances/missing-{uuid.uuid4().hex}/{action}", {})

    assert resp.status == 404 and "Message" in resp.json()


def test_suspend_holds_events_until_resume(shared_host):
    instance = shared_host.start_orchestration("two_events")
    shared_host.wait_for_status(instance, ("Running",))

    assert shared_host.post(f"{WEBHOOK}/instances/{instance}/suspend?reason=hold").status == 202
    shared_host.wait_for_status(instance, ("Suspended",))
    shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/a", 1)
    shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/b", 2)
    assert shared_host.status(instance)["runtimeStatus"] == "Suspended"
    shared_host.post(f"{WEBHOOK}/instances/{instance}/resume?reason=go")

    assert shared_host.wait_for_status(instance)["output"] == [1, 2]


def test_starting_a_running_id_is_409_and_a_finished_id_restarts(shared_host):
    instance = f"fixed-{uuid.uuid4().hex}"
    shared_host.start_orchestration("approval", instance_id=instance)

    conflict = shared_host.post(f"{WEBHOOK}/orchestrators/approval/{instance}")
    shared_host.post(f"{WEBHOOK}/instances/{instance}/terminate")
    shared_host.wait_for_status(instance)
    again = shared_host.post(f"{WEBHOOK}/orchestrators/hello_sequence/{instance}")

    assert conflict.status == 409 and "already exists" in conflict.json()["Message"]
    assert again.status == 202
    assert shared_host.wait_for_status(instance)["output"][0] == "Hello Tokyo!"


def test_query_filters_by_status_and_prefix_with_paging(shared_host):
    prefix = f"q-{uuid.uuid4().hex[:8]}-"
    for i in range(5):
        shared_host.start_orchestration("hello_sequence", instance_id=f"{prefix}{i}")
    for i in range(5):
        shared_host.wait_for_status(f"{prefix}{i}")

    seen, token = [], None
    for _ in range(10):
        headers = {"x-ms-continuation-token": token} if token else {}
        resp = shared_host.get(
            f"{WEBHOOK}/instances?instanceIdPrefix={prefix}&top=2&runtimeStatus=Completed",
            headers=headers,
        )
        seen += [s["instanceId"] for s in resp.json()]
        token = resp.headers.get("x-ms-continuation-token")
        if not token:
            break

    assert sorted(seen) == [f"{prefix}{i}" for i in range(5)]


def test_purge_by_id_removes_a_finished_instance(shared_host):
    instance = shared_host.start_orchestration("hello_sequence")
    shared_host.wait_for_status(instance)

    resp = shared_host.request("DELETE", f"{WEBHOOK}/instances/{instance}")

    assert resp.status == 200 and resp.json() == {"instancesDeleted": 1}
    assert shared_host.get(f"{WEBHOOK}/instances/{instance}").status == 404
    assert shared_host.request("DELETE", f"{WEBHOOK}/instances/{instance}").status == 404


def test_purge_of_a_running_instance_is_refused(shared_host):
    instance = shared_host.start_orchestration("approval")

    assert shared_host.request("DELETE", f"{WEBHOOK}/instances/{instance}").status == 412


# --- bad input: clear 4xx, nothing stored ----------------------------------------------


def _count(shared_host, prefix: str) -> int:
    return len(
        shared_host.get(f"{WEBHOOK}/instances?instanceIdPrefix={urllib.parse.quote(prefix)}").json()
    )


def test_unknown_orchestrator_is_400_with_the_extension_error_body(shared_host):
    resp = shared_host.post(f"{WEBHOOK}/orchestrators/no_such_thing/bad-start-1")

    body = resp.json()
    assert resp.status == 400
    assert body["Message"] == "One or more of the arguments submitted is incorrect"
    assert "no_such_thing" in body["ExceptionMessage"]
    assert shared_host.get(f"{WEBHOOK}/instances/bad-start-1").status == 404


@pytest.mark.parametrize("bad_id", ["a%5Cb", "a%23b", "a%3Fb", "%40entity", "ctl%01x", "x" * 257])
def test_malformed_instance_ids_are_400(shared_host, bad_id):
    resp = shared_host.post(f"{WEBHOOK}/orchestrators/hello_sequence/{bad_id}")

    assert resp.status == 400 and "Instance ID" in resp.json()["ExceptionMessage"]


def test_invalid_json_body_is_400_and_stores_nothing(shared_host):
    resp = shared_host.post(f"{WEBHOOK}/orchestrators/hello_sequence/badjson-1", raw=b"{not json")

    assert resp.status == 400 and "not valid JSON" in resp.json()["ExceptionMessage"]
    assert shared_host.get(f"{WEBHOOK}/instances/badjson-1").status == 404


def test_invalid_event_json_is_400_and_the_instance_keeps_waiting(shared_host):
    instance = shared_host.start_orchestration("approval")

    resp = shared_host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/approve", raw=b"{oops")

    assert resp.status == 400
    assert shared_host.status(instance)["runtimeStatus"] in ("Pending", "Running")


def test_unknown_management_route_is_404_json(shared_host):
    resp = shared_host.get(f"{WEBHOOK}/nothing/here")

    assert resp.status == 404 and "Message" in resp.json()


def test_purge_by_filter_requires_created_time_from(shared_host):
    assert shared_host.request("DELETE", f"{WEBHOOK}/instances").status == 400


# --- the app's HTTP functions -------------------------------------------------------------


def test_sync_http_function_with_route_constraint_and_query(shared_host):
    ok = shared_host.get("/api/hello/ann?x=1")
    constrained = shared_host.get("/api/hello/123")

    assert ok.status == 200 and ok.body == b"hi ann 1"
    assert ok.headers["Content-Type"].startswith("text/plain")
    assert constrained.status == 404


def test_async_http_function_gets_body_method_and_returns_headers(shared_host):
    resp = shared_host.request(
        "PUT", "/api/echo", raw=b"\x00\x01raw", headers={"Content-Type": "application/octet-stream"}
    )

    assert resp.status == 201 and resp.body == b"\x00\x01raw" and resp.headers["X-Method"] == "PUT"


def test_wrong_method_is_405_and_unknown_route_404(shared_host):
    assert shared_host.get("/api/echo").status == 405
    assert shared_host.get("/api/nowhere").status == 404
