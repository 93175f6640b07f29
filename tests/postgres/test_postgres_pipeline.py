"""A COMMIT whose answer was lost is settled right: a session terminated just after its
COMMIT was answered applies the write once, and a server that restarted since the
transaction began is not asked.

The regression test of pipeline mode's double completion (docs/postgres.md, "Pipeline
mode"): with the transactions in psycopg's pipeline mode, a session the server terminates
right after answering a COMMIT leaves the connection open but stuck in pipeline mode; the
store caught the error inside the pool's connection block, whose clean exit then sent a
COMMIT of its own that failed, and that failure escaped the settling of the transaction's
fate by ``pg_xact_status``: the write, applied, was run again. ``session_cut`` puts the
termination at exactly that point, every time.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from durable_host.store.base import StoreError
from durable_host.store.postgres import PostgresStore, from_spec
from durable_host.store.postgres.database import XACT
from tests.postgres.session_cut import SessionCutter

NOW = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_a_session_terminated_after_its_commit_applies_the_write_once(
    postgres_url: str, pipeline: str
) -> None:
    parts = urlsplit(postgres_url)
    assert parts.port is not None and parts.username and parts.password

    async def main() -> None:
        cutter = await SessionCutter(parts.port, postgres_url).start()
        spec = f"postgres:{cutter.url(parts.username, parts.password)}"
        # Read-only: no partitions, no heartbeats - the test's writes are the only COMMITs.
        env = {"DURABLE_HOST_POSTGRES_PIPELINE": pipeline}
        settings = from_spec(spec, "C" + uuid.uuid4().hex[:10], env=env)
        store = PostgresStore(settings, read_only=True)
        await store.open()
        try:
            for n in range(3):
                cutter.arm()
                await store.send(f"i{n}", {"kind": "event", "name": "e", "n": n}, NOW)
                assert cutter.cuts == n + 1, "the session was not terminated after its COMMIT"
                messages = await store.fetch_messages(f"i{n}", NOW)
                assert [m["n"] for _, m in messages] == [n], "the write applied twice"
        finally:
            await store.close()
            await cutter.close()

    asyncio.run(main())


def test_a_commit_is_not_settled_by_a_server_that_restarted_since(
    postgres_url: str, postgres_server
) -> None:
    """After a crash the server hands out again the transaction ids that never reached its
    log: ``pg_xact_status`` of such an id may describe another transaction. A commit whose
    answer was lost across a restart is therefore reported as unknown, never as applied."""

    async def main() -> None:
        store = PostgresStore(
            from_spec(f"postgres:{postgres_url}", "R" + uuid.uuid4().hex[:10], env={}),
            read_only=True,
        )
        await store.open()
        try:

            async def probe(conn: Any) -> tuple[int, str]:
                # A write: its commit is flushed before it is answered, so it survives the
                # crash (a transaction that wrote nothing may lose its commit record, and
                # its id is then "in the future": not committed, which is right too).
                await conn.execute("INSERT INTO host_secrets VALUES ('probe', 'x')")
                row = await (await conn.execute(f"SELECT {XACT}")).fetchone()
                return int(row[0]), str(row[1])

            xid = await store.db.write("probe", probe, fault=False)
            assert await store.db._committed(xid) is True  # same server: settled
            postgres_server.restart()
            with pytest.raises(StoreError, match="the server restarted since the transaction"):
                await store.db._committed(xid)
        finally:
            await store.close()

    asyncio.run(main())
