"""Versions and safe deploys on real hosts: two app versions, one task hub, taking turns.

``tests/apps/versioned_v1`` (defaultVersion 1.0) and ``versioned_v2`` (2.0, a new step before
the wait, taken only by instances of 2.0) serve one store in turn: on SQLite one file, the
host stopped and the other started; on Azure one hub, the second host taking the hub lease
when the first stops (one owner per hub: two hosts are never active on a hub at once).
Strategies other than the default come from app settings overriding host.json.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.harness import WEBHOOK, HostProcess, wait_for

STRICT = {"AzureFunctionsJobHost__extensions__durableTask__versionMatchStrategy": "Strict"}
FAIL = {"AzureFunctionsJobHost__extensions__durableTask__versionFailureStrategy": "Fail"}


def start_order(host: HostProcess, version: str | None = None) -> str:
    instance = f"order-{uuid.uuid4().hex[:8]}"
    query = f"?version={version}" if version is not None else ""
    response = host.post(f"{WEBHOOK}/orchestrators/order/{instance}{query}")
    assert response.status == 202, response.body
    return instance


def wait_waiting(host: HostProcess, instance: str) -> dict[str, Any]:
    return wait_for(
        lambda: (s := host.status(instance)) and s["customStatus"] == {"phase": "waiting"} and s,
        30,
        f"{instance} to wait for its event",
    )


def go(host: HostProcess, instance: str) -> None:
    response = host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/go", {"ok": True})
    assert response.status == 202, response.body


def wait_blocked(host: HostProcess, instance: str) -> dict[str, Any]:
    return wait_for(
        lambda: (s := host.status(instance)) and "versionBlock" in s and s,
        30,
        f"{instance} to be left untouched for its version",
    )


def test_running_instances_finish_on_their_version_and_new_ones_run_the_new_one(make_host):
    v1 = make_host("versioned_v1").start()
    old = start_order(v1)
    assert wait_waiting(v1, old)["version"] == "1.0"
    assert v1.stop() == 0

    v2 = make_host("versioned_v2").start()
    go(v2, old)
    finished = v2.wait_for_status(old)
    new = start_order(v2)
    wait_waiting(v2, new)
    go(v2, new)
    renewed = v2.wait_for_status(new)
    countdown = v2.start_orchestration("countdown", {"left": 2})
    newer = start_order(v2, "3.0")  # CurrentOrOlder (the default): a newer version waits

    assert finished["runtimeStatus"] == "Completed"
    # The child started without a version got the serving host's defaultVersion.
    assert finished["output"] == {
        "version": "1.0",
        "path": "v1-path",
        "child": "2.0",
        "pinned": "1.0",
    }
    assert renewed["output"] == {
        "version": "2.0",
        "path": "v2-path",
        "child": "2.0",
        "pinned": "2.0",
    }
    assert v2.wait_for_status(countdown)["output"] == "2.0"  # continue-as-new kept it
    blocked = wait_blocked(v2, newer)
    assert blocked["runtimeStatus"] == "Pending" and blocked["version"] == "3.0"
    assert blocked["versionBlock"]["instanceVersion"] == "3.0"
    assert blocked["versionBlock"]["hostVersion"] == "2.0"
    assert "VersionMismatch" in blocked["versionBlock"]["reason"]


def test_with_strict_matching_each_version_waits_visibly_for_a_host_of_its_own(make_host):
    v1 = make_host("versioned_v1", env=STRICT).start()
    old = start_order(v1)
    wait_waiting(v1, old)
    assert v1.stop() == 0

    v2 = make_host("versioned_v2", env=STRICT).start()
    go(v2, old)
    held = wait_blocked(v2, old)
    new = start_order(v2)
    wait_waiting(v2, new)
    go(v2, new)
    renewed = v2.wait_for_status(new)
    waiting_new = start_order(v2)
    wait_waiting(v2, waiting_new)
    listed = v2.get(f"{WEBHOOK}/instances?instanceIdPrefix={old}").json()
    parked = v2.get("/admin/host/metrics").json()["parked_for_version"]
    assert v2.stop() == 0

    back = make_host("versioned_v1", env=STRICT).start()
    finished = back.wait_for_status(old)
    go(back, waiting_new)
    held_new = wait_blocked(back, waiting_new)

    # Untouched on the 2.0 host: still running, its event not consumed, its own status kept.
    assert held["runtimeStatus"] == "Running" and held["customStatus"] == {"phase": "waiting"}
    assert held["versionBlock"]["versionMatchStrategy"] == "Strict"
    assert [s["versionBlock"]["instanceVersion"] for s in listed] == ["1.0"]
    assert parked == 1
    assert renewed["output"]["path"] == "v2-path"
    # The returning 1.0 host finds the event still waiting and finishes on the 1.0 path.
    assert finished["output"] == {
        "version": "1.0",
        "path": "v1-path",
        "child": "1.0",
        "pinned": "1.0",
    }
    assert held_new["runtimeStatus"] == "Running" and held_new["version"] == "2.0"
    history = back.status(waiting_new, "?showHistory=true")["historyEvents"]
    assert not any(e["EventType"] == "EventRaised" for e in history)


def test_with_the_fail_strategy_a_version_this_host_cannot_run_fails(make_host):
    host = make_host("versioned_v1", env=FAIL).start()
    instance = start_order(host, "2.0")
    # Through the SDK's durable client: start_new(..., version=) -> ?version= on its RPC base.
    older = host.post("/api/start/countdown?version=0.9", {"left": 1}).json()["id"]

    failed = host.wait_for_status(instance)
    ran = host.wait_for_status(older)

    assert failed["runtimeStatus"] == "Failed"
    assert "VersionMismatch" in failed["output"] and "'2.0'" in failed["output"]
    assert ran["output"] == "0.9" and ran["version"] == "0.9"  # older: CurrentOrOlder runs it
