"""Durable entities through the real SDK: calls and signals from orchestrations and clients."""

from __future__ import annotations

import concurrent.futures
import uuid

import pytest

from tests.harness import WEBHOOK, wait_for


def entity_state(host, key: str):
    resp = host.get(f"{WEBHOOK}/entities/counter/{key}")
    return resp.json() if resp.status == 200 else None


def test_orchestration_calls_and_signals_an_entity(shared_host):
    key = f"k-{uuid.uuid4().hex[:8]}"
    resp = shared_host.post("/api/orchestrators/counter_caller", key)

    status = shared_host.wait_for_status(resp.json()["id"])

    assert status["output"] == 11  # add 1 (call), add 10 (signal, same sender: in order), get
    assert entity_state(shared_host, key) == 11


def test_operation_error_reaches_the_caller_and_the_entity_keeps_serving(shared_host):
    instance = shared_host.start_orchestration("entity_error_caller")

    status = shared_host.wait_for_status(instance)
    shared_host.post(f"{WEBHOOK}/entities/counter/errors?op=add", 2)

    assert status["output"] == "caught: counter exploded"
    assert wait_for(
        lambda: entity_state(shared_host, "errors") == 2, 60, "entity to serve after an error"
    )


def test_client_signal_and_read_through_the_sdk(shared_host):
    key = f"sdk-{uuid.uuid4().hex[:8]}"
    for value in (1, 2, 3):
        assert shared_host.post(f"/api/entities/counter/{key}?op=add", value).status == 202

    state = wait_for(
        lambda: (r := shared_host.get(f"/api/entities/counter/{key}").json())["state"] == 6 and r,
        60,
        "signals",
    )

    assert state == {"exists": True, "state": 6}


def test_webhook_signal_read_delete_and_list(shared_host):
    key = f"hook-{uuid.uuid4().hex[:8]}"
    assert entity_state(shared_host, key) is None

    assert shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 5).status == 202
    wait_for(lambda: entity_state(shared_host, key) == 5, 60, "signal")
    listed = shared_host.get(f"{WEBHOOK}/entities/counter?fetchState=true").json()
    assert {"name": "counter", "key": key} in [row["entityId"] for row in listed]
    assert shared_host.request("DELETE", f"{WEBHOOK}/entities/counter/{key}").status == 202

    wait_for(lambda: entity_state(shared_host, key) is None, 60, "delete")


def test_entity_ids_show_in_instance_queries(shared_host):
    key = f"q-{uuid.uuid4().hex[:8]}"
    shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 1)
    wait_for(lambda: entity_state(shared_host, key) == 1, 60, "signal")

    status = shared_host.get(f"{WEBHOOK}/instances/@counter@{key}")

    assert status.status in (200, 202) and status.json()["instanceId"] == f"@counter@{key}"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/entities/nosuch/k?op=add", 404),
        ("/entities/counter/a%23b?op=add", 400),
        ("/entities/counter/k", 400),
    ],
)
def test_bad_entity_signals_are_rejected(shared_host, path, code):
    assert shared_host.post(WEBHOOK + path, 1).status == code


def test_signal_with_invalid_json_is_400_and_nothing_is_enqueued(shared_host):
    key = f"bad-{uuid.uuid4().hex[:8]}"

    resp = shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", raw=b"{nope")

    assert resp.status == 400
    assert shared_host.get(f"{WEBHOOK}/instances/@counter@{key}").status == 404


def test_counter_hammered_by_20_orchestrations_and_100_signals_counts_exactly(shared_host):
    key = f"hammer-{uuid.uuid4().hex[:8]}"

    def signal(_):
        return shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 1).status

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        starts = [
            pool.submit(shared_host.post, "/api/orchestrators/counter_caller", key)
            for _ in range(20)
        ]
        statuses = list(pool.map(signal, range(100)))
    ids = [f.result().json()["id"] for f in starts]
    for instance in ids:
        shared_host.wait_for_status(instance, timeout=60)

    assert statuses == [202] * 100
    # each orchestration adds 1 (call) + 10 (signal): 20 * 11 + 100
    assert wait_for(lambda: entity_state(shared_host, key) == 320, 30, "final count")


def test_instance_queries_list_entities_alongside_orchestrations(shared_host):
    key = f"listed-{uuid.uuid4().hex[:8]}"
    shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 1)
    wait_for(lambda: entity_state(shared_host, key) == 1, 60, "signal")

    listed = shared_host.get(f"{WEBHOOK}/instances?instanceIdPrefix=@counter@{key}").json()

    assert [row["instanceId"] for row in listed] == [f"@counter@{key}"]


def test_entity_state_is_purged_by_id_live_or_deleted(shared_host):
    live, deleted = f"purge-{uuid.uuid4().hex[:8]}", f"gone-{uuid.uuid4().hex[:8]}"
    for key in (live, deleted):
        shared_host.post(f"{WEBHOOK}/entities/counter/{key}?op=add", 3)
        wait_for(lambda k=key: entity_state(shared_host, k) == 3, 60, "signal")
    shared_host.request("DELETE", f"{WEBHOOK}/entities/counter/{deleted}")
    wait_for(lambda: entity_state(shared_host, deleted) is None, 60, "delete")

    purged = [
        shared_host.request("DELETE", f"{WEBHOOK}/instances/@counter@{k}") for k in (live, deleted)
    ]

    assert [p.status for p in purged] == [200, 200]
    assert [p.json() for p in purged] == [{"instancesDeleted": 1}] * 2
    assert entity_state(shared_host, live) is None
    assert shared_host.get(f"{WEBHOOK}/instances/@counter@{deleted}").status == 404
