"""What only the PostgreSQL store has, below the host: its settings and how they are shown,
the schema's version, the partitions' fencing, and several hubs in one database."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from durable_host.core.records import Completion, EntityCommit, Episode
from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import StoreError, UnitLostError
from durable_host.store.postgres import PostgresStore, from_spec
from durable_host.store.postgres.episodes import StaleRecordError
from durable_host.store.postgres.partitions import PartitionCountError
from durable_host.store.postgres.settings import PostgresSettingsError, describe, redact
from tests.store.contract_support import (
    T0,
    activity,
    at,
    event,
    record,
    start_message,
    started,
)


def test_settings_come_from_the_spec_or_the_setting_and_name_no_password() -> None:
    url = "postgresql://ann:s3cret-pw@db.example.com:6432/hubs?sslmode=verify-full"
    settings = from_spec("postgres", "MyHub", env={"DURABLE_HOST_POSTGRES": url})

    assert settings.schema == "dh_myhub"
    assert (
        describe(settings.conninfo) == "postgres ann@db.example.com:6432/hubs (sslmode=verify-full)"
    )
    assert "s3cret-pw" not in repr(settings) and "s3cret-pw" not in settings.describe()
    assert "connect_timeout" in settings.conninfo  # a default, unless the setting has one
    given = from_spec("postgres:host=h dbname=d password=pw2", "MyHub", env={})
    assert "pw2" not in given.describe()


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("postgres", {}, "needs the DURABLE_HOST_POSTGRES setting"),
        ("postgres:host=h", {"DURABLE_HOST_POSTGRES_POOL": "0"}, "from 1 to 200"),
        (
            "postgres:host=h",
            {"DURABLE_HOST_POSTGRES_POOL": "many"},
            "POOL='many' is not a whole number",
        ),
        (
            "postgres:host=h",
            {"DURABLE_HOST_POSTGRES_STATEMENT_TIMEOUT_MS": "-1"},
            "STATEMENT_TIMEOUT_MS='-1' is not a whole number from 0 to 3600000",
        ),
        (
            "postgres:host=h",
            {"DURABLE_HOST_POSTGRES_STATEMENT_TIMEOUT_MS": "1e3"},
            "STATEMENT_TIMEOUT_MS='1e3' is not a whole number",
        ),
        (
            "postgres:host=h",
            {"DURABLE_HOST_SILENCE_SECONDS": "61"},
            "DURABLE_HOST_SILENCE_SECONDS='61' is not a whole number of seconds from 1 to 60",
        ),
        ("postgres:host=h password='pw-xyz", {}, "not a valid libpq"),
    ],
)
def test_bad_settings_are_refused_by_name(spec: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(PostgresSettingsError, match=message) as caught:
        from_spec(spec, "MyHub", env=env)
    assert "pw-xyz" not in str(caught.value)


def test_a_bad_hub_name_is_refused() -> None:
    with pytest.raises(PostgresSettingsError, match="hub name"):
        from_spec("postgres:host=h", "x;drop", env={})


def test_redact_removes_the_password_in_every_form() -> None:
    conninfo = "postgresql://u:topsecret@h/db"
    text = (
        "failed for postgresql://u:topsecret@h/db, password=other 'topsecret'"
        " postgres://x:y@z password = 'quoted pw'"
    )
    cleaned = redact(text, conninfo)
    for secret in ("topsecret", "other", ":y@", "quoted pw"):
        assert secret not in cleaned, cleaned


def store_for(url: str, hub: str, **kw: Any) -> PostgresStore:
    return PostgresStore(from_spec(f"postgres:{url}", hub, env={}), **kw)


def test_a_schema_newer_than_the_host_is_refused(postgres_url: str) -> None:
    hub = "N" + uuid.uuid4().hex[:10]

    async def main() -> None:
        store = store_for(postgres_url, hub)
        await store.open()
        conn = await store.db.connect()
        await conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        await conn.close()
        await store.close()
        with pytest.raises(StoreError, match="version 99, newer than this host's 2"):
            await store_for(postgres_url, hub).open()

    asyncio.run(main())


@pytest.mark.parametrize("first", ["commit_entity", "begin_attempt"])
def test_a_host_whose_partition_was_taken_over_cannot_commit(postgres_url: str, first: str) -> None:
    """The first write after the takeover is refused by the fence inside its call (either
    function's); the host then knows, and refuses the next one before sending it."""
    hub = "F" + uuid.uuid4().hex[:10]

    async def main() -> None:
        old = store_for(postgres_url, hub, partition_count=1)
        await old.open()
        assert old.partitions is not None and old.partitions.held() == {0}
        # The owner's lease lapses (as if it hung): a second host takes the partition over.
        conn = await old.db.connect()
        await conn.execute("UPDATE partitions SET expires_at = '-infinity'")
        await conn.execute("DELETE FROM hosts")
        await conn.close()
        new = store_for(postgres_url, hub, partition_count=1)
        await new.open()
        try:
            assert new.partitions is not None and new.partitions.held() == {0}
            writes = {
                "commit_entity": lambda: old.commit_entity(entity_commit("@c@x")),
                "begin_attempt": lambda: old.begin_attempt("@c@x"),
            }
            with pytest.raises(UnitLostError, match="another host took it over"):
                await writes.pop(first)()
            assert old.partitions.held() == set()  # lost here, and nothing written
            assert await new.get_instance("@c@x") is None
            assert await new.begin_attempt("@c@x") == 1  # no count was written by the old
            [then] = writes.values()
            with pytest.raises(UnitLostError, match="does not own"):
                await then()
            await new.commit_entity(entity_commit("@c@x"))
            assert await new.get_instance("@c@x") is not None
            # Starts and events are any host's: the old one still takes them.
            await old.send("a", {"kind": "event", "name": "x"}, "2026-01-01T00:00:00Z")
            assert len(await new.fetch_messages("a", "2026-01-01T00:00:00Z")) == 1
        finally:
            await new.close()
            await old.close()

    asyncio.run(main())


def entity_commit(instance_id: str) -> EntityCommit:
    now = "2026-01-01T00:00:00Z"
    return EntityCommit(instance_id, [], True, '{"n": 1}', [], now)


def test_a_changed_partition_count_is_refused(postgres_url: str) -> None:
    hub = "P" + uuid.uuid4().hex[:10]

    async def main() -> None:
        first = store_for(postgres_url, hub, partition_count=4)
        await first.open()
        await first.close()
        other = store_for(postgres_url, hub, partition_count=8)
        with pytest.raises(PartitionCountError, match="partitionCount 4 and this host has"):
            await other.open()
        await other.close()

    asyncio.run(main())


def test_two_hubs_share_one_database_without_seeing_each_other(postgres_url: str) -> None:
    async def main() -> None:
        a = store_for(postgres_url, "A" + uuid.uuid4().hex[:10])
        b = store_for(postgres_url, "B" + uuid.uuid4().hex[:10])
        await a.open()
        await b.open()  # no standby wait: another hub, another lease
        try:
            await a.send("same-id", {"kind": "event", "name": "x"}, "2026-01-01T00:00:00Z")
            assert len(await a.fetch_messages("same-id", "2026-01-01T00:00:00Z")) == 1
            assert await b.fetch_messages("same-id", "2026-01-01T00:00:00Z") == []
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_a_notify_from_another_writer_wakes_the_poll_at_once(postgres_url: str) -> None:
    hub = "W" + uuid.uuid4().hex[:10]

    async def main() -> None:
        owner = store_for(postgres_url, hub)
        await owner.open()
        tool = store_for(postgres_url, hub, read_only=True)  # another process's writes
        await tool.open()
        try:
            await owner.poll()  # the first poll sweeps, and starts listening
            waiting = asyncio.ensure_future(owner.poll())
            await asyncio.sleep(0.2)
            await tool.db.write(
                "send",
                lambda conn: tool._message(conn, "woken", {"kind": "event", "name": "e"}, None),
            )
            instance_ids, _ = await asyncio.wait_for(waiting, timeout=3.0)  # sweep: 5 s
            assert instance_ids == ["woken"]
        finally:
            await tool.close()
            await owner.close()

    asyncio.run(main())


def test_a_step_is_two_round_trips_and_its_next_record_is_kept(postgres_url: str) -> None:
    """BEGIN with one call of the episode function (one message), then COMMIT; the next
    episode's record is the row the commit left (no read) while the listener listens. A
    start is two as well."""
    hub = "R" + uuid.uuid4().hex[:10]

    async def main() -> None:
        store = store_for(postgres_url, hub)
        await store.open()
        try:
            await store.poll()  # the first poll starts listening
            quiet(store)
            before = store.round_trips
            first = await store.create_instance(
                record("s"), start_message(), NON_RUNNING, count_first=True
            )
            assert first is not None and store.round_trips - before == 2  # BEGIN+call, COMMIT
            assert (await store.episode_record("s")).status == "Pending"  # type: ignore[union-attr]
            assert store.round_trips - before == 2
            await started(store, "a")
            [work] = await store.commit_episode("a", Episode(outbox=[activity("a", 0)]), T0)
            for step in range(1, 4):
                before = store.round_trips
                kept = await store.episode_record("a")
                assert kept is not None and kept.status == "Running"
                completion = Completion(work.work_id, {"kind": "event"}, consumed=True)
                episode = Episode(events=[event(step)], outbox=[activity("a", step)])
                now = at(step)
                [work] = await store.commit_step("a", [completion], episode, now)
                assert store.round_trips - before == 2
                assert (await store.episode_record("a")).updated_at == now  # type: ignore[union-attr]
            assert [e["EventId"] for e in await store.get_history("a")][-3:] == [1, 2, 3]
        finally:
            await store.close()

    asyncio.run(main())


def test_a_row_written_by_another_process_fails_the_episode_decided_on_the_old_one(
    postgres_url: str,
) -> None:
    hub = "S" + uuid.uuid4().hex[:10]

    async def main() -> None:
        store = store_for(postgres_url, hub)
        await store.open()
        try:
            await store.poll()
            await started(store, "a")
            assert (await store.episode_record("a")) is not None
            # Another process rewrites the row (as a rewind or a restart of the id would).
            conn = await store.db.connect()
            await conn.execute("UPDATE instances SET updated_at = %s", (at(9),))
            await conn.close()
            with pytest.raises(StaleRecordError, match="changed since the episode read it"):
                await store.commit_episode("a", Episode(events=[event(1)]), at(1))
            assert len(await store.get_history("a")) == 1  # nothing applied
            record = await store.episode_record("a")  # read again: the kept row was dropped
            assert record is not None and record.updated_at == at(9)
            await store.commit_episode("a", Episode(events=[event(1)]), at(10))
            assert len(await store.get_history("a")) == 2
        finally:
            await store.close()

    asyncio.run(main())


def test_an_attempt_and_an_entity_batch_are_two_round_trips_each(postgres_url: str) -> None:
    """An attempt count and an entity's batch are one call of a function each, BEGIN with
    it, then COMMIT: the batch takes its messages, resets the count, writes the entity's row
    and its responses in that one call."""
    hub = "E" + uuid.uuid4().hex[:10]

    async def main() -> None:
        store = store_for(postgres_url, hub)
        await store.open()
        try:
            await store.poll()
            quiet(store)
            await store.send("@c@x", {"kind": "event", "name": "op"}, T0)
            [(message_id, _)] = await store.fetch_messages("@c@x", T0)
            before = store.round_trips
            assert await store.begin_attempt("@c@x") == 1
            assert await store.begin_attempt("@c@x") == 2
            assert store.round_trips - before == 4
            response = {"kind": "event", "name": "done"}
            before = store.round_trips
            await store.commit_entity(
                EntityCommit("@c@x", [message_id], True, '{"n": 1}', [("o", response)], T0)
            )
            assert store.round_trips - before == 2
            assert await store.fetch_messages("@c@x", T0) == []
            assert [m for _, m in await store.fetch_messages("o", T0)] == [response]
            entity = await store.get_instance("@c@x")
            assert entity is not None and entity.entity_state == '{"n": 1}'
            assert entity.entity_exists and entity.status == "Running"
            assert await store.begin_attempt("@c@x") == 1  # the batch reset the count
        finally:
            await store.close()

    asyncio.run(main())


def quiet(store: PostgresStore) -> None:
    """Stop the membership's background rounds (their heartbeats are round trips too); the
    partitions stay held for the lease's 15 s."""
    assert store.membership is not None
    for task in (store.membership._task, store.membership._beats):
        assert task is not None
        task.cancel()


def test_a_connection_whose_prepared_calls_were_dropped_prepares_them_again(
    postgres_url: str,
) -> None:
    """psycopg sends DEALLOCATE ALL after a rollback on a session where it prepared
    statements of its own, which drops the calls every pooled connection prepares too: the
    next start or episode on that connection prepares them again and applies once."""
    hub = "D" + uuid.uuid4().hex[:10]

    async def main() -> None:
        store = PostgresStore(
            from_spec(f"postgres:{postgres_url}", hub, env={"DURABLE_HOST_POSTGRES_POOL": "1"})
        )
        await store.open()
        try:
            assert store.db.pool is not None
            async with store.db.pool.connection() as conn:  # the pool's one connection
                await conn.execute("DEALLOCATE ALL")
            await started(store, "a")
            async with store.db.pool.connection() as conn:
                await conn.execute("DEALLOCATE ALL")
            [work] = await store.commit_episode("a", Episode(outbox=[activity("a", 0)]), T0)
            completion = Completion(work.work_id, {"kind": "event"}, consumed=True)
            async with store.db.pool.connection() as conn:
                await conn.execute("DEALLOCATE ALL")
            await store.commit_step("a", [completion], Episode(events=[event(1)]), at(1))
            assert [e["EventId"] for e in await store.get_history("a")][-1:] == [1]
            assert await store.pending_activities() == []
        finally:
            await store.close()

    asyncio.run(main())
