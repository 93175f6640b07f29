"""Azure store: an entity whose state lives in a blob keeps one blob, not one per operation.

A state above the inline limit goes to a payload blob under a name never reused, so every
operation writes a new blob; the commit that replaces the head drops the blob the old head
named. A reader still holding the old head reads the head again instead of failing; when
there is nothing newer to read (a purge, or a blob lost under the current head) it fails at once.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError

from durable_host.store.azure.codec import INLINE_LIMIT, partition_key, payload_blob_dir
from durable_host.store.base import EntityCommit
from tests.store.contract_support import T0, at

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


def test_a_reader_of_a_purged_entity_hears_the_blob_is_gone(run_store) -> None:
    async def body(store: Any) -> None:
        await operate(store, 1)
        old = await store.tables.read_head(partition_key(ENTITY))
        await store.purge(ENTITY)

        with pytest.raises(ResourceNotFoundError):  # no head to read again
            await store.instances._rows.instance_record(partition_key(ENTITY), old.row)

    run_store(body)


def test_a_lost_blob_the_current_head_names_fails_without_rereading(run_store) -> None:
    async def body(store: Any) -> None:
        await operate(store, 1)
        head = await store.tables.read_head(partition_key(ENTITY))
        (blob,) = await payload_blobs(store)
        await store.tables.container.delete_blob(blob)  # lost, not replaced: nothing changed
        reads = 0
        read_head = store.tables.read_head

        async def counted(partition: str) -> Any:
            nonlocal reads
            reads += 1
            return await read_head(partition)

        store.tables.read_head = counted
        with pytest.raises(ResourceNotFoundError):
            await store.instances._rows.instance_record(partition_key(ENTITY), head.row)
        assert reads == 1  # one look at the head shows the blob was not replaced

    run_store(body)
