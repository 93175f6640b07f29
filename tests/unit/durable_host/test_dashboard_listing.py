"""The dashboard's pure listing rules: orders, counts, the parent and children of an instance,
and the parameters it refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from durable_host import history as h
from durable_host.dashboard import listing
from durable_host.records import InstanceRecord

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
