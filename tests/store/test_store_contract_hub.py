"""The Store port's contract for the task hub's services, one suite for every implementation:
queries and purge, host secrets (also from a read-only store beside the owner), the order
of ready instances, and timer-trigger schedules.

Each test drives the port directly, as the host would; times are passed in, never slept
for. The shared helpers are in ``contract_support.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_host.core.orchestration import Episode
from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import EntityCommit, Query
from tests.store.contract_support import (
    T0,
    activity,
    at,
    event,
    raised,
    record,
    start_message,
    started,
)

# --- queries and purge -------------------------------------------------------------------------


async def populated(store: Any) -> None:
    for n, instance_id in enumerate(["job-1", "job-2", "job-3", "other"]):
        await started(store, instance_id, created=at(n))
    await store.fetch_messages("job-2", at(10))
    await store.commit_episode("job-2", Episode(events=[event(5)], status="Completed"), at(10))
    await store.send("@counter@k", {"kind": "op", "request": {"op": "add", "id": "r"}}, T0)
    messages = await store.fetch_messages("@counter@k", T0)
    await store.commit_entity(
        EntityCommit("@counter@k", [i for i, _ in messages], True, "1", [], T0)
    )


def ids(page: Any) -> list[str]:
    return [r.instance_id for r in page.records]


def test_query_filters_by_status_time_prefix_and_kind(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)

        assert ids(await store.query(Query())) == ["job-1", "job-2", "job-3", "other"]
        assert ids(await store.query(Query(statuses=("Completed",)))) == ["job-2"]
        assert ids(await store.query(Query(statuses=("Running", "Completed"), prefix="job"))) == [
            "job-1",
            "job-2",
            "job-3",
        ]
        assert ids(await store.query(Query(created_from=at(1), created_to=at(2)))) == [
            "job-2",
            "job-3",
        ]
        assert ids(await store.query(Query(updated_from=at(10)))) == ["job-2"]
        assert ids(await store.query(Query(entities=True))) == ["@counter@k"]
        assert len((await store.query(Query(entities=None))).records) == 5

    run_store(body)


PREFIXED = [
    "s/a:turn:1",
    "s/a:turn:1:run",
    "s/a:turn:10",
    "s/a:turn:2",
    "s/a:turn;x",  # the character after ':' - just above the range of "s/a:turn:"
    "s/a:turn\U0001f600",  # an astral character after the prefix
    "s/b:turn:1",
    "s%a:turn:1",  # '%' is how the Azure keys escape '/'
    "s/a:tur\ud7ff",  # a last character from which no bound is taken
    "s/a:tur\ud7ffz",
]


@pytest.mark.parametrize(
    "prefix",
    ["s/a:turn:", "s/a:turn:1", "s/a:turn", "s/", "s%", "s/a:tur\ud7ff", "z", "s/a:turn\U0001f600"],
)
def test_a_prefix_query_returns_exactly_the_ids_with_the_prefix(run_store, prefix) -> None:
    # Prefix queries run as key ranges (store codec ``prefix_bound``): nothing may fall out of
    # the range or into it, whatever the ids' characters or the stores' escaping.
    async def body(store: Any) -> None:
        for n, instance_id in enumerate(PREFIXED):
            await started(store, instance_id, created=at(n))

        found = ids(await store.query(Query(prefix=prefix)))

        assert found == sorted(i for i in PREFIXED if i.startswith(prefix))

    run_store(body)


def test_query_pages_with_top_and_continuation(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)

        first = await store.query(Query(top=3))
        second = await store.query(Query(top=3, continuation=first.continuation))

        assert (ids(first), first.continuation) == (["job-1", "job-2", "job-3"], "job-3")
        assert (ids(second), second.continuation) == (["other"], None)

    run_store(body)


def test_purge_removes_the_instance_its_history_inbox_and_work(run_store) -> None:
    async def body(store: Any) -> None:
        await started(store, "a", events=3)
        await store.fetch_messages("a", T0)
        await store.commit_episode("a", Episode(events=[event(1)], outbox=[activity("a", 1)]), T0)
        await store.send("a", raised("late"), T0)
        await started(store, "b")

        assert await store.purge("a") == 1
        assert await store.purge("a") == 0

        assert await store.get_instance("a") is None
        assert await store.get_history("a") == []
        assert await store.fetch_messages("a", T0) == []
        assert await store.pending_activities() == []
        assert (await store.get_instance("b")).status == "Running"

    run_store(body)


def test_purge_many_removes_only_the_terminal_instances_the_query_matches(run_store) -> None:
    async def body(store: Any) -> None:
        await populated(store)
        await store.fetch_messages("other", at(11))
        await store.commit_episode("other", Episode(events=[event(5)], status="Failed"), at(11))

        assert await store.purge_many(Query(statuses=("Running",), prefix="job")) == 0
        assert await store.purge_many(Query(created_from=at(0), prefix="job")) == 1
        assert ids(await store.query(Query())) == ["job-1", "job-3", "other"]
        assert await store.purge_many(Query(created_from=at(0), entities=None)) == 1
        assert ids(await store.query(Query(entities=None))) == ["@counter@k", "job-1", "job-3"]

    run_store(body)


# --- host secrets ------------------------------------------------------------------------------


def test_a_secret_is_written_only_over_the_value_the_writer_read(run_store) -> None:
    async def body(store: Any) -> None:
        assert await store.get_secret("keys") is None

        assert await store.swap_secret("keys", None, "one") is True
        assert await store.swap_secret("keys", None, "two") is False
        assert await store.swap_secret("keys", "stale", "two") is False
        assert await store.get_secret("keys") == "one"
        assert await store.swap_secret("keys", "one", "two") is True

        assert await store.get_secret("keys") == "two"
        assert await store.get_secret("other") is None

    run_store(body)


def test_a_store_opened_read_only_beside_the_owner_shares_its_secrets(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    import uuid

    from tests.store.conftest import open_kind

    hub = "S" + uuid.uuid4().hex[:12]

    def read_only() -> Any:
        return open_kind(kind, tmp_path, request, hub, read_only=True)

    async def main() -> None:
        tool = read_only()
        await tool.open()  # before any owner: a fresh hub
        try:
            assert await tool.swap_secret("keys", None, "from the tool") is True
            owner = open_kind(kind, tmp_path, request, hub)
            await owner.open()
            try:
                assert await owner.get_secret("keys") == "from the tool"
                assert await owner.swap_secret("keys", "from the tool", "rotated") is True
                assert await tool.get_secret("keys") == "rotated"
            finally:
                await owner.close()
        finally:
            await tool.close()

    asyncio.run(main())


def test_ready_instances_come_in_arrival_order_not_id_order(run_store) -> None:
    async def body(store: Any) -> None:
        for instance_id in ("zulu", "alpha", "mike"):
            await store.create_instance(record(instance_id), start_message(), NON_RUNNING)
        await store.send("alpha", raised("later"), T0)  # a newer message changes nothing

        assert await store.ready_instances(T0) == ["zulu", "alpha", "mike"]

    run_store(body)


# --- timer-trigger schedules ---------------------------------------------------------------


def test_a_schedule_occurrence_is_claimed_by_exactly_one_writer(run_store) -> None:
    async def body(store) -> None:
        assert await store.get_schedule("tick") is None
        claims = await asyncio.gather(
            *(store.swap_schedule("tick", None, f"claim-{n}") for n in range(4))
        )
        assert claims.count(True) == 1
        winner = f"claim-{claims.index(True)}"
        assert await store.get_schedule("tick") == winner
        assert await store.swap_schedule("tick", "stale", "next") is False
        assert await store.swap_schedule("tick", winner, "next") is True
        assert await store.get_schedule("tick") == "next"
        assert await store.get_schedule("other") is None
        assert await store.get_secret("tick") is None  # schedules and secrets never mix

    run_store(body)
