"""The hub's schema in PostgreSQL, created and migrated by the host, with a version.

A task hub is one schema (``dh_<hub>``), so several hubs share one database and a DBA can
grant, back up or drop one hub alone. ``meta.schema_version`` records the version the
tables have; ``migrate`` brings an older schema up step by step (``MIGRATIONS``), under a
transaction-scoped advisory lock so two hosts starting together do not race, and refuses a
schema newer than this host knows (``SchemaTooNewError``): an older host must not write
tables whose meaning it does not know.

Text that is compared or sorted (instance ids, timestamps) is ``COLLATE "C"``: byte order,
the order of the other stores, whatever the database's default collation.
"""

from __future__ import annotations

from psycopg import AsyncConnection, sql

SCHEMA_VERSION = 2

# Version 1: the tables of the SQLite store, plus the hub lease and the schema's own meta.
V1 = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    owner TEXT,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
INSERT INTO lease (id, owner, epoch, expires_at) VALUES (1, NULL, 0, '-infinity')
    ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    execution_id TEXT,
    version TEXT,
    input TEXT,
    output TEXT,
    custom_status TEXT,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    parent_instance_id TEXT,
    entity_state TEXT,
    entity_exists BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX IF NOT EXISTS instances_created ON instances (created_at);
CREATE TABLE IF NOT EXISTS history (
    instance_id TEXT COLLATE "C" NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);
CREATE TABLE IF NOT EXISTS inbox (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id TEXT COLLATE "C" NOT NULL,
    message TEXT NOT NULL,
    visible_at TEXT COLLATE "C"
);
CREATE INDEX IF NOT EXISTS inbox_instance ON inbox (instance_id, id);
CREATE INDEX IF NOT EXISTS inbox_due ON inbox (visible_at) WHERE visible_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS attempts (
    instance_id TEXT COLLATE "C" PRIMARY KEY,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS activities (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id TEXT COLLATE "C" NOT NULL,
    execution_id TEXT NOT NULL,
    task_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    input TEXT,
    dequeue_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS activities_instance ON activities (instance_id);
CREATE TABLE IF NOT EXISTS host_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# Version 2: partitioned ownership (``partitions``): a lease row per partition, heartbeats,
# and activity claims that any host makes. The hub lease of version 1 is taken for good (a
# new epoch, no expiry): a host of version 1 still running finds its epoch gone at its
# next commit and stops; one started later refuses the newer schema.
V2 = """
CREATE TABLE IF NOT EXISTS partitions (
    unit INTEGER PRIMARY KEY,
    owner TEXT,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS hosts (
    id TEXT PRIMARY KEY,
    version TEXT NOT NULL DEFAULT '',
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    extra TEXT NOT NULL DEFAULT '{}',
    expires_at TIMESTAMPTZ NOT NULL
);
UPDATE lease SET owner = 'partitioned task hub', epoch = epoch + 1, expires_at = 'infinity';
ALTER TABLE activities ADD COLUMN IF NOT EXISTS claimed_by TEXT
"""

# MIGRATIONS[n] takes a schema of version n to n + 1 (index 0: an empty schema).
MIGRATIONS: tuple[str, ...] = (V1, V2)
assert len(MIGRATIONS) == SCHEMA_VERSION


class SchemaTooNewError(Exception):
    """The hub's schema was written by a newer host: this one must not use it."""


async def migrate(conn: AsyncConnection[tuple[object, ...]], schema: str) -> int:
    """Create or upgrade ``schema`` to ``SCHEMA_VERSION`` in one transaction; the version
    found before (0: none). Raises ``SchemaTooNewError`` for a newer schema."""
    name = sql.Identifier(schema)
    async with conn.transaction():
        # One migration at a time per hub, whichever host runs it.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        found = await _version(conn)
        if found > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"the task hub schema {schema!r} has version {found}, newer than this host's"
                f" {SCHEMA_VERSION}: upgrade the host (or use another hub)"
            )
        for step in MIGRATIONS[found:]:
            for statement in _statements(step):
                await conn.execute(statement.encode())
        if found < SCHEMA_VERSION:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
    return found


async def _version(conn: AsyncConnection[tuple[object, ...]]) -> int:
    cur = await conn.execute("SELECT to_regclass('meta') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    cur = await conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    row = await cur.fetchone()
    return int(str(row[0])) if row else 0


def _statements(script: str) -> list[str]:
    """A script's statements (none of them holds a semicolon of its own)."""
    return [s.strip() for s in script.split(";") if s.strip()]
