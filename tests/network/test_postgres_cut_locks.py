"""A host cut off from PostgreSQL in the middle of a transaction must not stall its
partitions: the server ends its session, and nothing the survivor does waits on it.

A network cut leaves the cut host's session "idle in transaction" on the server with the
row locks it took (the fence's ``FOR KEY SHARE`` on its partition, its heartbeat row). The
test makes that state exactly, without a network: store ``a`` opens a transaction on one of
its own pooled connections, takes those locks as an episode and a heartbeat do, and then
neither sends another byte nor closes the connection, as a cut host cannot; its membership
loops are stopped (its heartbeat falls silent). Store ``b`` must evict ``a`` and take the
partition within the silence plus a few seconds (before the fix: its ``FOR UPDATE`` waited
on the lock for the statement timeout, 30 s, again and again), and ``a``'s late commit is
refused by the server's fence. Waits are bounded; nothing asserts on durations beyond that bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from durable_host.store.base import UnitLostError
from durable_host.store.postgres import PostgresStore, from_spec
from tests.store.test_azure_partitions import first_episode

START = {"kind": "start", "event": {"EventType": 0, "Name": "o"}}
SILENCE = 2
# What the takeover may take: the silence, a balancing round and the server's end of the
# idle session; well under the 30 s statement timeout the survivor used to wait for.
BOUND = SILENCE + 12


@pytest.mark.timeout(90)
def test_a_transaction_left_open_by_a_cut_host_does_not_stall_the_takeover(
    postgres_url: str,
) -> None:
    hub = "L" + uuid.uuid4().hex[:10]
    env = {"DURABLE_HOST_LEASE_SECONDS": "60", "DURABLE_HOST_SILENCE_SECONDS": str(SILENCE)}

    async def main() -> float:
        a, b = (
            PostgresStore(from_spec(f"postgres:{postgres_url}", hub, env=env), partition_count=1)
            for _ in range(2)
        )
        await a.open()
        await b.open()
        try:
            assert a.partitions is not None and a.partitions.held() == {0}
            await a.send("i", START, "t")
            messages = await a.fetch_messages("i", "t")
            assert a.db.pool is not None
            conn = await a.db.pool.getconn()
            # What a cut in the middle of an episode leaves: the fence and the heartbeat
            # row locked by a transaction that never ends from the client's side.
            await conn.execute("BEGIN")
            await conn.execute(
                "SELECT 1 FROM partitions WHERE unit = 0 AND epoch = %s FOR KEY SHARE",
                (a.partitions.epochs()[0],),
            )
            await conn.execute("UPDATE hosts SET draining = draining WHERE id = %s", (a.owner,))
            assert a.membership is not None
            # Cut: from now on its heartbeat does not change. Its watch is stopped too, so
            # ``a`` still believes it holds the partition: the refusal below is the server's
            # fence (the partition row's epoch), not ``a`` giving up by itself.
            for task in (a.membership._task, a.membership._beats, a.membership._watch):
                assert task is not None
                task.cancel()
            cut = time.monotonic()
            assert b.partitions is not None
            while b.partitions.held() != {0} and time.monotonic() - cut < BOUND:
                await asyncio.sleep(0.1)
            took = time.monotonic() - cut
            assert b.partitions.held() == {0}, f"b did not take the partition in {BOUND}s"
            assert a.partitions.held() == {0}  # a believes it still holds it
            late = first_episode(messages, [{"EventType": 0}])
            with pytest.raises(UnitLostError):
                await a.commit_episode("i", late, "t")
            assert await b.get_history("i") == []  # nothing of a's landed
            await a.db.pool.putconn(conn)
            return took
        finally:
            await b.close()
            await a.close()

    took = asyncio.run(main())
    print(f"partition taken {took:.1f}s after the cut (silence {SILENCE}s)")
