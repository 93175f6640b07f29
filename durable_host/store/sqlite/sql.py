"""The SQL of the embedded store: its schema, rows as records, and the statements its
transactions share. Pure functions of a connection; ``sqlite.py`` owns the transactions.
"""

from __future__ import annotations

import sqlite3
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

SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    execution_id TEXT,
    version TEXT,
    input TEXT,
    output TEXT,
    custom_status TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    parent_instance_id TEXT,
    entity_state TEXT,
    entity_exists INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS instances_created ON instances(created_at);
CREATE TABLE IF NOT EXISTS history (
    instance_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    message TEXT NOT NULL,
    visible_at TEXT
);
CREATE INDEX IF NOT EXISTS inbox_instance ON inbox(instance_id, id);
CREATE INDEX IF NOT EXISTS inbox_due ON inbox(visible_at) WHERE visible_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS attempts (
    instance_id TEXT PRIMARY KEY,
    count INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS activities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    task_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    input TEXT,
    dequeue_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS host_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""


def complete_work(db: sqlite3.Connection, instance_id: str, completion: Completion) -> bool:
    """Remove the work item and, unless the episode committed with it took the result, put
    the result in the inbox; False (nothing written) if another run already reported it."""
    if db.execute("DELETE FROM activities WHERE id=?", (completion.work_id,)).rowcount == 0:
        return False
    if not completion.consumed:
        db.execute(
            "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,NULL)",
            (instance_id, codec.encode(completion.message)),
        )
    return True


def delete_inbox(db: sqlite3.Connection, ids: list[int]) -> None:
    db.executemany("DELETE FROM inbox WHERE id=?", [(i,) for i in ids])


def update_instance(db: sqlite3.Connection, instance_id: str, episode: Episode, now: str) -> None:
    if episode.replace_history:
        db.execute(
            "UPDATE instances SET execution_id=?, name=?, input=?, version=?,"
            " parent_instance_id=?, output=NULL, custom_status=NULL WHERE instance_id=?",
            (
                episode.execution_id,
                episode.name,
                episode.input_json,
                episode.version,
                codec.parent_instance_id(episode),
                instance_id,
            ),
        )
        if (
            db.execute("SELECT 1 FROM instances WHERE instance_id=?", (instance_id,)).fetchone()
            is None
        ):
            # Sub-orchestrations are created by their first episode, not by a client call.
            db.execute(
                f"INSERT INTO instances ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    instance_id,
                    episode.name,
                    RuntimeStatus.RUNNING,
                    episode.execution_id,
                    episode.version,
                    episode.input_json,
                    None,
                    None,
                    now,
                    now,
                    codec.parent_instance_id(episode),
                    None,
                    0,
                ),
            )
    sets, args = ["updated_at=?"], list[Any]([now])
    if episode.status is not None:
        sets.append("status=?")
        args.append(episode.status)
    if codec.writes_output(episode):
        sets.append("output=?")
        args.append(episode.output_json)
    if episode.custom_status_changed:
        sets.append("custom_status=?")
        args.append(episode.custom_status_json)
    db.execute(f"UPDATE instances SET {', '.join(sets)} WHERE instance_id=?", (*args, instance_id))


def write_outbox(db: sqlite3.Connection, episode: Episode) -> list[ActivityWork]:
    created: list[ActivityWork] = []
    for item in episode.outbox:
        if item.kind == OutgoingKind.ACTIVITY:
            p = item.payload
            cursor = db.execute(
                "INSERT INTO activities (instance_id, execution_id, task_id, name, input,"
                " dequeue_count) VALUES (?,?,?,?,?,1)",
                (p["instance_id"], p["execution_id"], p["task_id"], p["name"], p["input_json"]),
            )
            assert cursor.lastrowid is not None
            created.append(
                ActivityWork(
                    cursor.lastrowid,
                    p["instance_id"],
                    p["execution_id"],
                    p["task_id"],
                    p["name"],
                    p["input_json"],
                    1,
                )
            )
        else:
            db.execute(
                "INSERT INTO inbox (instance_id, message, visible_at) VALUES (?,?,?)",
                (item.target, codec.encode(item.payload), item.visible_at),
            )
    return created


def filters(query: Query) -> tuple[str, list[Any]]:
    where, args = ["1=1"], list[Any]()
    if query.entities is True:
        where.append("instance_id LIKE '@%'")
    elif query.entities is False:
        where.append("instance_id NOT LIKE '@%'")
    for column, op, value in (
        ("created_at", ">=", query.created_from),
        ("created_at", "<=", query.created_to),
        ("updated_at", ">=", query.updated_from),
        ("updated_at", "<=", query.updated_to),
        ("instance_id", ">", query.continuation),
    ):
        if value is not None:
            where.append(f"{column}{op}?")
            args.append(value)
    if query.statuses:
        where.append(f"status IN ({','.join('?' * len(query.statuses))})")
        args.extend(query.statuses)
    if query.prefix:
        where.append("substr(instance_id, 1, ?)=?")
        args.extend([len(query.prefix), query.prefix])
        # The same rows as a key range, so the primary key's index finds them.
        where.append("instance_id>=?")
        args.append(query.prefix)
        if (bound := codec.prefix_bound(query.prefix)) is not None:
            where.append("instance_id<?")
            args.append(bound)
    return " AND ".join(where), args


def purge_ids(db: sqlite3.Connection, ids: list[str]) -> int:
    count = 0
    for instance_id in ids:
        count += db.execute("DELETE FROM instances WHERE instance_id=?", (instance_id,)).rowcount
        db.execute("DELETE FROM history WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM inbox WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM activities WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM attempts WHERE instance_id=?", (instance_id,))
    return count
