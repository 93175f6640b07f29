"""The statements the PostgreSQL store's transactions share: rows as records, an episode's
writes, activity completions, query filters and purges. Each function runs on a connection
inside a transaction ``database.Database`` opened; ``store.py`` decides which run together.
Multi-row writes are one statement each (``unnest``), whatever the number of rows.
"""

from __future__ import annotations

from typing import Any

from durable_host.core.records import (
    ActivityWork,
    Completion,
    Episode,
    OutgoingKind,
    Query,
    RuntimeStatus,
)
from durable_host.store import codec
from durable_host.store.codec import COLUMNS
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


async def set_attempts(db: Database, conn: Conn, instance_id: str, count_next: bool) -> None:
    if count_next:
        await db.execute(
            conn,
            "INSERT INTO attempts (instance_id, count) VALUES (%s, 1)"
            " ON CONFLICT (instance_id) DO UPDATE SET count = 1",
            (instance_id,),
        )
    else:
        await db.execute(conn, "DELETE FROM attempts WHERE instance_id = %s", (instance_id,))


async def append_history(db: Database, conn: Conn, instance_id: str, episode: Episode) -> None:
    if episode.replace_history or episode.rewrite_history:
        await db.execute(conn, "DELETE FROM history WHERE instance_id = %s", (instance_id,))
    if not episode.events:
        return
    await db.execute(
        conn,
        "INSERT INTO history (instance_id, seq, event)"
        " SELECT %(id)s, base.next + e.ord - 1, e.event"
        " FROM (SELECT COALESCE(MAX(seq) + 1, 0) AS next FROM history"
        "       WHERE instance_id = %(id)s) AS base,"
        " unnest(%(events)s::text[]) WITH ORDINALITY AS e(event, ord)",
        {"id": instance_id, "events": [codec.encode(e) for e in episode.events]},
    )


async def update_instance(
    db: Database, conn: Conn, instance_id: str, episode: Episode, now: str
) -> None:
    if episode.replace_history:
        # Sub-orchestrations are created by their first episode, not by a client call.
        await db.execute(
            conn,
            f"INSERT INTO instances ({COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, NULL, NULL, %s, %s, %s, NULL, FALSE)"
            " ON CONFLICT (instance_id) DO UPDATE SET execution_id = excluded.execution_id,"
            " name = excluded.name, input = excluded.input, version = excluded.version,"
            " parent_instance_id = excluded.parent_instance_id, output = NULL,"
            " custom_status = NULL",
            (
                instance_id,
                episode.name,
                RuntimeStatus.RUNNING,
                episode.execution_id,
                episode.version,
                episode.input_json,
                now,
                now,
                codec.parent_instance_id(episode),
            ),
        )
    sets, args = ["updated_at = %s"], list[Any]([now])
    if episode.status is not None:
        sets.append("status = %s")
        args.append(episode.status)
    if codec.writes_output(episode):
        sets.append("output = %s")
        args.append(episode.output_json)
    if episode.custom_status_changed:
        sets.append("custom_status = %s")
        args.append(episode.custom_status_json)
    await db.execute(
        conn,
        f"UPDATE instances SET {', '.join(sets)} WHERE instance_id = %s",
        (*args, instance_id),
    )


async def write_outbox(db: Database, conn: Conn, episode: Episode) -> list[ActivityWork]:
    """The episode's activities (created handed: dequeue count 1) and messages."""
    activities = [i.payload for i in episode.outbox if i.kind == OutgoingKind.ACTIVITY]
    messages = [i for i in episode.outbox if i.kind != OutgoingKind.ACTIVITY]
    created: list[ActivityWork] = []
    if activities:
        cur = await db.execute(
            conn,
            "INSERT INTO activities (instance_id, execution_id, task_id, name, input,"
            " dequeue_count, claimed_by) SELECT a.i, a.e, a.t, a.n, a.p, 1, %s FROM"
            " unnest(%s::text[], %s::text[], %s::int[], %s::text[], %s::text[])"
            " WITH ORDINALITY AS a(i, e, t, n, p, ord) ORDER BY a.ord RETURNING id",
            (
                db.writer or None,
                [p["instance_id"] for p in activities],
                [p["execution_id"] for p in activities],
                [p["task_id"] for p in activities],
                [p["name"] for p in activities],
                [p["input_json"] for p in activities],
            ),
        )
        ids = sorted(int(r[0]) for r in await cur.fetchall())  # identity follows row order
        for work_id, p in zip(ids, activities, strict=True):
            created.append(
                ActivityWork(
                    work_id,
                    p["instance_id"],
                    p["execution_id"],
                    p["task_id"],
                    p["name"],
                    p["input_json"],
                    1,
                )
            )
    if messages:
        await insert_messages(
            db,
            conn,
            [(m.target, codec.encode(m.payload), m.visible_at) for m in messages],
        )
    return created


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


def filters(query: Query) -> tuple[str, list[Any]]:
    where, args = ["TRUE"], list[Any]()
    if query.entities is True:
        where.append("instance_id LIKE '@%%'")
    elif query.entities is False:
        where.append("instance_id NOT LIKE '@%%'")
    for column, op, value in (
        ("created_at", ">=", query.created_from),
        ("created_at", "<=", query.created_to),
        ("updated_at", ">=", query.updated_from),
        ("updated_at", "<=", query.updated_to),
        ("instance_id", ">", query.continuation),
    ):
        if value is not None:
            where.append(f"{column} {op} %s")
            args.append(value)
    if query.statuses:
        where.append("status = ANY(%s)")
        args.append(list(query.statuses))
    if query.prefix:
        where.append("left(instance_id, %s) = %s")
        args.extend([len(query.prefix), query.prefix])
        # The same rows as a key range, so the primary key's index finds them.
        where.append("instance_id >= %s")
        args.append(query.prefix)
        if (bound := codec.prefix_bound(query.prefix)) is not None:
            where.append("instance_id < %s")
            args.append(bound)
    return " AND ".join(where), args


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
