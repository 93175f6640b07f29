"""Azure store: an entity whose state lives in a blob keeps one blob, not one per operation.

A state above the inline limit goes to a payload blob under a name never reused, so every
operation writes a new blob; the commit that replaces the head drops the blob the old head
named. A reader still holding the old head reads the head again instead of failing.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_host.store.azure.codec import INLINE_LIMIT, partition_key, payload_blob_dir
from durable_host.store.base import EntityCommit
from tests.store.test_store_contract import T0, at

ENTITY = "@session@big"


@pytest.fixture
def kind() -> str:
    return "azure"


def big_state(n: int) -> str:
    return '"' + str(n) * (INLINE_LIMIT + 100) + '"'  # a JSON string above the inline limit


async def operate(store: Any, n: int) -> None:
    await store.send(ENTITY, {"kind": "op", "request": {"op": "set", "id": f"r{n}"}}, T0)
    messages = await store.fetch_messages(ENTITY, at(n))
    await store.commit_entity(
        EntityCommit(ENTITY, [i for i, _ in messages], True, big_state(n), [], at(n))
    )


async def payload_blobs(store: Any) -> list[str]:
    prefix = payload_blob_dir(partition_key(ENTITY)) + "/"
    container = store.tables.container
    return [b.name async for b in container.list_blobs(name_starts_with=prefix)]


def test_each_operation_replaces_the_state_blob_instead_of_adding_one(run_store) -> None:
    async def body(store: Any) -> None:
        for n in range(1, 6):
            await operate(store, n)
            assert (await store.get_instance(ENTITY)).entity_state == big_state(n)
            assert len(await payload_blobs(store)) == 1

        await store.fetch_messages(ENTITY, at(9))
        await store.commit_entity(EntityCommit(ENTITY, [], True, "1", [], at(9)))
        assert (await store.get_instance(ENTITY)).entity_state == "1"
        assert await payload_blobs(store) == []  # an inline state needs no blob

    run_store(body)


def test_a_reader_holding_a_replaced_head_reads_the_new_one(run_store) -> None:
    async def body(store: Any) -> None:
        await operate(store, 1)
        old = await store.tables.read_head(partition_key(ENTITY))

        await operate(store, 2)  # drops the blob ``old`` names

        record = await store.instances._rows.instance_record(partition_key(ENTITY), old.row)
        assert record.entity_state == big_state(2)

    run_store(body)
