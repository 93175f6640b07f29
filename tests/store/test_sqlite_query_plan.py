"""A prefix query on the SQLite store is an index range, not a scan of every instance.

The kernel lists a session's instances by prefix on every turn (history retention, settling
a turn), so a scan would make each turn cost more as the store grows. SQLite's own query
plan for the store's filter (``sqlite_sql.filters``) is the evidence.
"""

from __future__ import annotations

import sqlite3

from durable_host.core.records import Query
from durable_host.store.codec import COLUMNS
from durable_host.store.sqlite.sql import SCHEMA, filters


def plan(query: Query) -> str:
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    where, args = filters(query)
    sql = f"SELECT {COLUMNS} FROM instances WHERE {where} ORDER BY instance_id LIMIT ?"
    rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", (*args, -1)).fetchall()
    return " | ".join(str(row[-1]) for row in rows)


def test_a_prefix_query_searches_the_primary_key_index() -> None:
    found = plan(Query(prefix="session:turn:"))

    assert "SEARCH instances USING" in found and "instance_id>? AND instance_id<?" in found, found


def test_a_query_without_a_prefix_still_scans() -> None:
    # The contrast that makes the test above mean something.
    assert "SCAN instances" in plan(Query(statuses=("Running",)))
