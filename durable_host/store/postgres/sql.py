"""The statements the PostgreSQL store's transactions share: rows as records, an episode's
writes, activity completions, query filters and purges. Each function runs on a connection
inside a transaction ``database.Database`` opened; ``store.py`` decides which run together.
Multi-row writes are one statement each (``unnest``), whatever the number of rows.
"""

from __future__ import annotations

from durable_host.core.records import (
    Completion,
)
from durable_host.store import codec
from durable_host.store.postgres.database import Conn, Database


async def complete_work(db: Database, conn: Conn, instance_id: str, done: Completion) -> bool:
    """Remove the work item and, unless the episode committed with it took the result, put
    the result in the inbox; False (nothing written) if another run already reported it."""
    # RETURNING, not rowcount: in pipeline mode a rowcount is not known until a result is read.
    cur = await db.execute(
        conn, "DELETE FROM activities WHERE id = %s RETURNING id", (done.work_id,)
    )
    if await cur.fetchone() is None:
        return False
    if not done.consumed:
        await insert_messages(db, conn, [(instance_id, codec.encode(done.message), None)])
    return True


async def delete_inbox(db: Database, conn: Conn, ids: list[int]) -> None:
    if ids:
        await db.execute(conn, "DELETE FROM inbox WHERE id = ANY(%s)", (list(ids),))


async def insert_messages(
    db: Database, conn: Conn, rows: list[tuple[str, str, str | None]]
) -> list[int]:
    """Append messages to inboxes in one statement and NOTIFY the hub's listeners of the
    targets another host owns (delivered at COMMIT); their ids, in order.

    Only those: PostgreSQL serializes the commits of notifying transactions (a lock held
    until the commit is flushed), so a notification for an instance this host's engine
    was told of already would cost the concurrent commits their shared WAL flush."""
    if not rows:
        return []
    cur = await db.execute(
        conn,
        "INSERT INTO inbox (instance_id, message, visible_at)"
        " SELECT m.i, m.m, m.v FROM unnest(%s::text[], %s::text[], %s::text[])"
        " WITH ORDINALITY AS m(i, m, v, ord) ORDER BY m.ord RETURNING id",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )
    ids = sorted(int(r[0]) for r in await cur.fetchall())
    fencer = db.fencer
    elsewhere = sorted({r[0] for r in rows if fencer is None or not fencer.owns(r[0])})
    if elsewhere:
        await db.execute(
            conn,
            "SELECT pg_notify(%s, %s || ' ' || t) FROM unnest(%s::text[]) AS t",
            (db.settings.channel, db.writer, elsewhere),
        )
    return ids


async def purge_ids(db: Database, conn: Conn, ids: list[str]) -> int:
    if not ids:
        return 0
    cur = await db.execute(
        conn, "DELETE FROM instances WHERE instance_id = ANY(%s) RETURNING 1", (ids,)
    )
    count = len(await cur.fetchall())
    for table in ("history", "inbox", "activities", "attempts"):
        await db.execute(
            conn,
            f"DELETE FROM {table} WHERE instance_id = ANY(%s)",
            (ids,),
        )
    return count
