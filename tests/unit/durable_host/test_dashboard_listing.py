"""The dashboard's listing rules: orders, counts, the parent and children of an instance,
the parameters it refuses, and the bound on a time-ordered scan (against a real SQLite store)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from durable_host import dashboard
from durable_host.core import history as h
from durable_host.core.records import InstanceRecord
from durable_host.dashboard import listing
from durable_host.functions.config import NON_RUNNING
from durable_host.store.sqlite.store import SqliteStore

AT = "2026-12-06T04:00:00.000000Z"


def record(instance_id: str, created_at: str, status: str = "Completed") -> InstanceRecord:
    return InstanceRecord(instance_id, "name", status, created_at=created_at)


def test_orders_are_by_the_stored_time_then_the_id() -> None:
    rows = [
        record("b", "2026-12-06T04:00:00.000200Z"),
        record("a", "2026-12-06T04:00:00.000100Z"),  # the same second as b, earlier
        record("c", "2026-12-06T04:00:00.000100Z"),  # the same moment as a: by id
    ]
    ids = {sort: [r.instance_id for r in listing.ordered(rows, sort)] for sort in listing.SORTS}
    assert ids == {"newest": ["b", "c", "a"], "oldest": ["a", "c", "b"], "id": ["a", "b", "c"]}


def test_counts_name_every_status() -> None:
    rows = [record("a", AT, "Running"), record("b", AT, "Running"), record("c", AT, "Failed")]
    assert listing.counts(rows, ("Running", "Failed", "Pending")) == {
        "Running": 2,
        "Failed": 1,
        "Pending": 0,
    }


def test_children_come_from_the_creation_events_once_each_in_order() -> None:
    events = [
        h.execution_started(
            at=AT, name="p", instance_id="p", execution_id="e", input_json=None, version=None
        ),
        h.sub_orchestration_created(1, AT, "first", "p-1", None, None),
        h.sub_orchestration_created(2, AT, "second", "p-2", None, None),
        h.sub_orchestration_created(3, AT, "first", "p-1", None, None),
    ]
    assert listing.children(events) == [
        {"instanceId": "p-1", "name": "first"},
        {"instanceId": "p-2", "name": "second"},
    ]
    assert listing.parent_of(None, events) is None


def test_the_parent_is_the_rows_else_the_started_events() -> None:
    parent = {"Name": "p", "OrchestrationInstance": {"InstanceId": "p", "ExecutionId": "e"}}
    started = h.execution_started(
        at=AT,
        name="c",
        instance_id="c",
        execution_id="x",
        input_json=None,
        version=None,
        parent=parent,
    )
    assert listing.parent_of(None, [started]) == "p"
    assert listing.parent_of("row-parent", [started]) == "row-parent"


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: listing.sort_order("sideways"), ["sort", "'sideways'"]),
        (lambda: listing.page_number("offset", "x"), ["offset", "'x'", "not a number"]),
        (lambda: listing.page_number("offset", "-3"), ["offset", "'-3'", "negative"]),
    ],
)
def test_bad_parameters_are_refused_by_name(call: Callable[[], object], words: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        call()
    for word in words:
        assert word in str(caught.value)


def test_absent_parameters_take_their_defaults() -> None:
    assert listing.sort_order(None) == "newest" and listing.sort_order("") == "newest"
    assert listing.page_number("offset", None) == 0


def test_a_time_order_reads_a_bounded_scan_and_says_when_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real SQLite store: with the bound lowered to 4 rows (2 a page), a hub of 6
    instances answers the newest of the 4 it read and ``complete: false``; a hub within the
    bound answers everything, ``complete: true``; the counts say the same."""
    monkeypatch.setattr(dashboard, "MAX_SORT_SCAN", 4)
    monkeypatch.setattr(dashboard, "SCAN_PAGE", 2)

    async def body() -> tuple[dict[str, Any], ...]:
        store = SqliteStore(tmp_path / "hub.db")
        await store.open()
        try:
            for n in range(6):  # created in id order, a second apart
                created = f"2026-12-06T04:00:0{n}.000000Z"
                rec = InstanceRecord(f"i{n}", "orch", "Pending", created_at=created,
                                     updated_at=created)  # fmt: skip
                start = {"kind": "start", "event": {"EventType": 0, "EventId": -1,
                         "Name": "orch", "Timestamp": created}}  # fmt: skip
                await store.create_instance(rec, start, NON_RUNNING)
            client = SimpleNamespace(
                store=store, engine=SimpleNamespace(parking=SimpleNamespace(status=lambda _: None))
            )
            board = dashboard.Dashboard(client, "hub")  # type: ignore[arg-type]
            ask = make_mocked_request
            return (
                await board._instances(ask("GET", "/api/instances?top=10")),
                await board._instances(ask("GET", "/api/instances?top=10&prefix=i1")),
                await board._counts(ask("GET", "/api/counts")),
            )
        finally:
            await store.close()

    bounded, narrowed, counted = asyncio.run(body())
    assert [r["instanceId"] for r in bounded["instances"]] == ["i3", "i2", "i1", "i0"]
    assert bounded["complete"] is False
    assert [r["instanceId"] for r in narrowed["instances"]] == ["i1"]
    assert narrowed["complete"] is True
    assert counted["counts"]["Pending"] == 4 and counted["complete"] is False
