"""Versions and safe deploys on real hosts: two app versions, one task hub.

``tests/apps/versioned_v1`` (defaultVersion 1.0) and ``versioned_v2`` (2.0, a new step before
the wait, taken only by instances of 2.0) serve one store in turn: on SQLite one file, the
host stopped and the other started; on Azure or PostgreSQL one hub, the second host taking the
partitions when the first stops. There they also serve one hub side by side (the rainbow test): both
hosts for the whole run, each version's instances run only by the host of that version
(each step's log line names the deployment that ran it), both making progress at once.
Strategies other than the default come from app settings overriding host.json.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

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


@pytest.mark.timeout(240)  # partitions move between the versions every few rounds
def test_two_versions_run_side_by_side_on_one_hub(make_host, store_kind):
    if store_kind == "sqlite":
        pytest.skip("one SQLite file has one host at a time: versions take turns there")
    v1 = make_host("versioned_v1", env=STRICT).start()
    v2 = make_host("versioned_v2", env=STRICT).start()
    hosts = {"1.0": v1, "2.0": v2}
    # Started through either host: a start lands in the instance's partition, whoever owns it.
    orders = {
        version: [start_order((v1, v2)[n % 2], version) for n in range(6)]
        for version in ("1.0", "2.0")
    }
    everyone = [(version, i) for version, ids in orders.items() for i in ids]
    deadline = time.monotonic() + 200
    for _version, instance in everyone:
        wait_for(
            lambda i=instance: (s := v1.status(i)) and s["customStatus"] == {"phase": "waiting"},
            max(1.0, deadline - time.monotonic()),
            f"{instance} to wait for its event",
        )
    for version, instance in everyone:
        go(hosts["2.0" if version == "1.0" else "1.0"], instance)  # through the other host
    done: dict[str, dict[str, Any]] = {}
    for _version, instance in everyone:
        done[instance] = v2.wait_for_status(instance, timeout=max(1.0, deadline - time.monotonic()))
    alive = [h.process.poll() is None for h in (v1, v2)]
    logs = {v: h.log_path.read_text() for v, h in hosts.items() if h.log_path}

    assert alive == [True, True]  # both served the hub for the whole run
    for version, ids in orders.items():
        other = "2.0" if version == "1.0" else "1.0"
        for instance in ids:
            assert done[instance]["runtimeStatus"] == "Completed", done[instance]
            # The child started without a version took the defaultVersion of the host that
            # ran the step after "go": a host of the instance's own version.
            assert done[instance]["output"] == {
                "version": version,
                "path": "v1-path" if version == "1.0" else "v2-path",
                "child": version,
                "pinned": version,
            }
            ran = f"order step go of version {version} ran on {version}"
            assert sum(ran in line and instance in line for line in logs[version].splitlines()) == 1
        # No step of this version ran on the other deployment.
        assert f"of version {version} ran on {other}" not in logs[other]
    # Both deployments took partitions of the hub while the other one was serving it. Whether
    # their completions interleave is not promised: a version with no runnable work at one
    # moment hands every partition on, and gets them back a dwell and a round later.
    for log in logs.values():
        assert "this host holds it as epoch" in log
