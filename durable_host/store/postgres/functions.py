"""Server-side functions: an episode's (or a step's) writes, and a start's, in one statement.

An episode of an orchestration used to be about ten statements, each a round trip to the
server (the fence, the work items, the inbox, the attempt count, the history, the status
row, the activities, the messages); a start about six. ``commit_episode`` and
``create_instance`` send one call of a PL/pgSQL function each, which runs the same
statements inside the server, so a step's transaction costs two round trips: ``BEGIN``
with the call, in one message (``database.Database.call_begun``; the call returns the
transaction id the commit is settled by, and the row it leaves, for the instance's next
episode), then ``COMMIT``. The call's arguments travel as one jsonb parameter (``packed``),
and every pooled connection prepares the calls by name at connect (``prepared``): the
message is ``BEGIN; EXECUTE name('...')``, so the server plans neither the call, nor
(PL/pgSQL keeps its statements' plans per connection) the statements inside it, per step.

Outcomes the functions report instead of writing (nothing is written then):

* ``lost``: the partition's row no longer carries this host's epoch (another host took
  it over); the caller raises ``UnitLostError``.
* ``gone``: a step's work item is gone (another run reported the result first).
* ``stale``: the instance's row changed since the record the episode was decided on
  (another process wrote it meanwhile: a restart of the id, a rewind, a purge).

An entity's batch (``commit_entity``) and an attempt count (``begin_attempt``, before every
episode and batch the store does not count in advance) are calls of functions of their own
in the same way: an entity call used to cost about 22 round trips, five of them each attempt
count and seven the batch's commit.

The functions are named after a hash of their text (``step_<hash>``), created if missing at
start and never replaced: hosts of different versions on one hub each call their own.
Messages NOTIFY the hub's channel only for the targets the caller names (those another
host owns, or all of a start's when another host owns it): PostgreSQL serializes the
commits of notifying transactions, and the owner's engine was told already.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psycopg import AsyncConnection

from durable_host.core.records import (
    Completion,
    Episode,
    InstanceRecord,
    OutgoingKind,
    RuntimeStatus,
)
from durable_host.store import codec
from durable_host.store.codec import COLUMNS, instance_record

_RECORD_OUT = ", ".join(
    f"OUT r_{c.strip()} {'boolean' if c.strip() == 'entity_exists' else 'text'}"
    for c in COLUMNS.split(",")
)
_RECORD_INTO = ", ".join(f"r_{c.strip()}" for c in COLUMNS.split(","))

_EPISODE_BODY = f"""(
    p_unit integer, p_epoch bigint, p_id text, p_expected text,
    p_works bigint[], p_results text[], p_consumed bigint[], p_count_next boolean,
    p_clear_history boolean, p_events text[],
    p_create boolean, p_name text, p_execution_id text, p_version text, p_input text,
    p_parent text, p_now text, p_status text, p_set_output boolean, p_output text,
    p_set_custom boolean, p_custom text,
    p_writer text, p_a_execution text[], p_a_task integer[], p_a_name text[],
    p_a_input text[], p_m_target text[], p_m_message text[], p_m_visible text[],
    p_channel text, p_notify text[],
    OUT xid bigint, OUT outcome text, OUT work_ids bigint[], {_RECORD_OUT}
) LANGUAGE plpgsql AS $fn$
DECLARE
    held integer;
    current_at text;
BEGIN
    xid := pg_current_xact_id()::text::bigint;
    IF p_unit IS NOT NULL THEN
        PERFORM 1 FROM partitions WHERE unit = p_unit AND epoch = p_epoch FOR KEY SHARE;
        IF NOT FOUND THEN outcome := 'lost'; RETURN; END IF;
    END IF;
    IF cardinality(p_works) > 0 THEN
        SELECT count(*) INTO held FROM
            (SELECT 1 FROM activities WHERE id = ANY(p_works) FOR UPDATE) AS w;
        IF held < cardinality(p_works) THEN outcome := 'gone'; RETURN; END IF;
        DELETE FROM activities WHERE id = ANY(p_works);
    END IF;
    IF p_expected IS NOT NULL THEN
        SELECT updated_at INTO current_at FROM instances WHERE instance_id = p_id FOR UPDATE;
        IF current_at IS DISTINCT FROM p_expected THEN outcome := 'stale'; RETURN; END IF;
    END IF;
    IF cardinality(p_results) > 0 THEN
        INSERT INTO inbox (instance_id, message)
            SELECT p_id, r.m FROM unnest(p_results) WITH ORDINALITY AS r(m, ord)
            WHERE r.m IS NOT NULL ORDER BY r.ord;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM inbox WHERE id = ANY(p_consumed);
    END IF;
    IF p_count_next THEN
        INSERT INTO attempts (instance_id, count) VALUES (p_id, 1)
            ON CONFLICT (instance_id) DO UPDATE SET count = 1;
    ELSE
        DELETE FROM attempts WHERE instance_id = p_id;
    END IF;
    IF p_clear_history THEN
        DELETE FROM history WHERE instance_id = p_id;
    END IF;
    IF cardinality(p_events) > 0 THEN
        INSERT INTO history (instance_id, seq, event)
            SELECT p_id, base.next + e.ord - 1, e.event
            FROM (SELECT COALESCE(MAX(seq) + 1, 0) AS next FROM history
                  WHERE instance_id = p_id) AS base,
            unnest(p_events) WITH ORDINALITY AS e(event, ord);
    END IF;
    IF p_create THEN
        INSERT INTO instances ({COLUMNS})
            VALUES (p_id, p_name, '{RuntimeStatus.RUNNING}', p_execution_id, p_version,
                    p_input, NULL, NULL, p_now, p_now, p_parent, NULL, FALSE)
            ON CONFLICT (instance_id) DO UPDATE SET execution_id = excluded.execution_id,
                name = excluded.name, input = excluded.input, version = excluded.version,
                parent_instance_id = excluded.parent_instance_id, output = NULL,
                custom_status = NULL;
    END IF;
    UPDATE instances SET updated_at = p_now,
        status = COALESCE(p_status, status),
        output = CASE WHEN p_set_output THEN p_output ELSE output END,
        custom_status = CASE WHEN p_set_custom THEN p_custom ELSE custom_status END
        WHERE instance_id = p_id
        RETURNING {COLUMNS} INTO {_RECORD_INTO};
    IF cardinality(p_a_task) > 0 THEN
        WITH created AS (
            INSERT INTO activities (instance_id, execution_id, task_id, name, input,
                                    dequeue_count, claimed_by)
            SELECT p_id, a.e, a.t, a.n, a.p, 1, NULLIF(p_writer, '')
            FROM unnest(p_a_execution, p_a_task, p_a_name, p_a_input)
                WITH ORDINALITY AS a(e, t, n, p, ord)
            ORDER BY a.ord RETURNING id)
        SELECT array_agg(id ORDER BY id) INTO work_ids FROM created;
    END IF;
    IF cardinality(p_m_target) > 0 THEN
        INSERT INTO inbox (instance_id, message, visible_at)
            SELECT m.i, m.m, m.v FROM unnest(p_m_target, p_m_message, p_m_visible)
                WITH ORDINALITY AS m(i, m, v, ord)
            ORDER BY m.ord;
    END IF;
    IF cardinality(p_notify) > 0 THEN
        PERFORM pg_notify(p_channel, p_writer || ' ' || t) FROM unnest(p_notify) AS t;
    END IF;
    outcome := 'ok';
END
$fn$"""

_START_BODY = f"""(
    p_id text, p_name text, p_status text, p_execution_id text, p_version text,
    p_input text, p_created text, p_updated text, p_parent text, p_overridable text[],
    p_message text, p_visible text, p_count_first boolean, p_channel text, p_payload text,
    OUT xid bigint, OUT outcome text, OUT found_status text, OUT inbox_id bigint,
    {_RECORD_OUT}
) LANGUAGE plpgsql AS $fn$
BEGIN
    xid := pg_current_xact_id()::text::bigint;
    SELECT status INTO found_status FROM instances WHERE instance_id = p_id FOR UPDATE;
    IF FOUND THEN
        IF NOT (found_status = ANY(p_overridable)) THEN outcome := 'exists'; RETURN; END IF;
        -- A restarted id starts clean: old history and undelivered messages go.
        DELETE FROM history WHERE instance_id = p_id;
        DELETE FROM inbox WHERE instance_id = p_id;
    END IF;
    INSERT INTO instances ({COLUMNS})
        VALUES (p_id, p_name, p_status, p_execution_id, p_version, p_input, NULL, NULL,
                p_created, p_updated, p_parent, NULL, FALSE)
        ON CONFLICT (instance_id) DO UPDATE SET name = excluded.name,
            status = excluded.status, execution_id = excluded.execution_id,
            version = excluded.version, input = excluded.input, output = NULL,
            custom_status = NULL, created_at = excluded.created_at,
            updated_at = excluded.updated_at,
            parent_instance_id = excluded.parent_instance_id, entity_state = NULL,
            entity_exists = FALSE
        RETURNING {COLUMNS} INTO {_RECORD_INTO};
    INSERT INTO inbox (instance_id, message, visible_at) VALUES (p_id, p_message, p_visible)
        RETURNING id INTO inbox_id;
    IF p_payload IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_payload);
    END IF;
    IF p_count_first THEN
        INSERT INTO attempts (instance_id, count) VALUES (p_id, 1)
            ON CONFLICT (instance_id) DO UPDATE SET count = 1;
    END IF;
    outcome := 'ok';
END
$fn$"""

_FENCE = """
    xid := pg_current_xact_id()::text::bigint;
    IF p_unit IS NOT NULL THEN
        PERFORM 1 FROM partitions WHERE unit = p_unit AND epoch = p_epoch FOR KEY SHARE;
        IF NOT FOUND THEN outcome := 'lost'; RETURN; END IF;
    END IF;"""

_ATTEMPT_BODY = f"""(
    p_unit integer, p_epoch bigint, p_id text,
    OUT xid bigint, OUT outcome text, OUT attempts integer
) LANGUAGE plpgsql AS $fn$
BEGIN{_FENCE}
    -- The count must outlive a crash of the host, not of the server: an asynchronous
    -- commit keeps it off the episode's critical path (a count lost with the server only
    -- allows one more attempt). Local to the transaction: it outlives this function.
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO attempts AS a (instance_id, count) VALUES (p_id, 1)
        ON CONFLICT (instance_id) DO UPDATE SET count = a.count + 1
        RETURNING a.count INTO attempts;
    outcome := 'ok';
END
$fn$"""

_ENTITY_BODY = f"""(
    p_unit integer, p_epoch bigint, p_id text, p_consumed bigint[], p_name text,
    p_status text, p_now text, p_state text, p_exists boolean,
    p_m_target text[], p_m_message text[], p_channel text, p_writer text, p_notify text[],
    OUT xid bigint, OUT outcome text
) LANGUAGE plpgsql AS $fn$
BEGIN{_FENCE}
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM inbox WHERE id = ANY(p_consumed);
    END IF;
    DELETE FROM attempts WHERE instance_id = p_id;
    INSERT INTO instances (instance_id, name, status, created_at, updated_at, entity_state,
                           entity_exists)
        VALUES (p_id, p_name, p_status, p_now, p_now, p_state, p_exists)
        ON CONFLICT (instance_id) DO UPDATE SET updated_at = excluded.updated_at,
            entity_state = excluded.entity_state, entity_exists = excluded.entity_exists,
            status = excluded.status;
    IF cardinality(p_m_target) > 0 THEN
        INSERT INTO inbox (instance_id, message, visible_at)
            SELECT m.i, m.m, NULL FROM unnest(p_m_target, p_m_message)
                WITH ORDINALITY AS m(i, m, ord)
            ORDER BY m.ord;
    END IF;
    IF cardinality(p_notify) > 0 THEN
        PERFORM pg_notify(p_channel, p_writer || ' ' || t) FROM unnest(p_notify) AS t;
    END IF;
    outcome := 'ok';
END
$fn$"""


def _named(prefix: str, body: str) -> str:
    return prefix + hashlib.sha256(body.encode()).hexdigest()[:12]


EPISODE_FUNCTION = _named("step_", _EPISODE_BODY)
START_FUNCTION = _named("start_", _START_BODY)
ATTEMPT_FUNCTION = _named("attempt_", _ATTEMPT_BODY)
ENTITY_FUNCTION = _named("entity_", _ENTITY_BODY)
# The calls pass their arguments as one jsonb array, unpacked into the functions' typed
# parameters by the call itself: psycopg dumps a list parameter element by element in
# Python, and an episode has a dozen of them (about a third of a commit's client-side CPU,
# measured), while json.dumps of the whole tuple runs in C. The functions are unchanged.
_ARRAY = (
    "ARRAY(SELECT e FROM jsonb_array_elements_text(j->{n}) WITH ORDINALITY AS t(e, o)"
    " ORDER BY o)::{kind}[]"
)


def _unpacked(kinds: tuple[str, ...]) -> str:
    """The call's arguments, read from ``j`` (a jsonb array) position by position:
    ``kinds`` names each one's SQL type, an array's with ``[]``."""
    parts = []
    for n, kind in enumerate(kinds):
        if kind.endswith("[]"):
            parts.append(_ARRAY.format(n=n, kind=kind[:-2]))
        elif kind == "text":
            parts.append(f"j->>{n}")
        else:
            parts.append(f"(j->>{n})::{kind}")
    return ", ".join(parts)


_START_KINDS = (
    *("text",) * 9,
    "text[]",
    "text",
    "text",
    "boolean",
    "text",
    "text",
)
_EPISODE_KINDS = (
    "integer",
    "bigint",
    "text",
    "text",
    "bigint[]",
    "text[]",
    "bigint[]",
    "boolean",
    "boolean",
    "text[]",
    "boolean",
    *("text",) * 6,
    "text",
    "boolean",
    "text",
    "boolean",
    "text",
    "text",
    "text[]",
    "integer[]",
    "text[]",
    "text[]",
    "text[]",
    "text[]",
    "text[]",
    "text",
    "text[]",
)
_ATTEMPT_KINDS = ("integer", "bigint", "text")
_ENTITY_KINDS = (
    "integer",
    "bigint",
    "text",
    "bigint[]",
    *("text",) * 4,
    "boolean",
    "text[]",
    "text[]",
    "text",
    "text",
    "text[]",
)


def _call(function: str, kinds: tuple[str, ...]) -> str:
    return (
        f"SELECT f.* FROM (SELECT %s::jsonb AS j) AS a, LATERAL {function}({_unpacked(kinds)}) AS f"
    )


_START_CALL = _call(START_FUNCTION, _START_KINDS)
_EPISODE_CALL = _call(EPISODE_FUNCTION, _EPISODE_KINDS)
_ATTEMPT_CALL = _call(ATTEMPT_FUNCTION, _ATTEMPT_KINDS)
_ENTITY_CALL = _call(ENTITY_FUNCTION, _ENTITY_KINDS)
_FUNCTIONS = (
    (EPISODE_FUNCTION, _EPISODE_BODY, _EPISODE_CALL),
    (START_FUNCTION, _START_BODY, _START_CALL),
    (ATTEMPT_FUNCTION, _ATTEMPT_BODY, _ATTEMPT_CALL),
    (ENTITY_FUNCTION, _ENTITY_BODY, _ENTITY_CALL),
)


async def install(conn: AsyncConnection[tuple[Any, ...]], schema: str) -> None:
    """Create this host's functions in the hub's schema unless they exist (module doc)."""
    for name, body, _ in _FUNCTIONS:
        async with conn.transaction():
            cur = await conn.execute("SELECT to_regproc(%s) IS NOT NULL", (f"{schema}.{name}",))
            row = await cur.fetchone()
            if row and row[0]:
                continue
            # The migration's lock: two hosts starting together do not race.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
            await conn.execute(f"CREATE OR REPLACE FUNCTION {name}{body}".encode())


class EpisodeOutcome:
    """What the episode function answered: the transaction id and outcome, the activity
    work items' ids (in the episode's order) and the row it left."""

    __slots__ = ("outcome", "record", "work_ids", "xid")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.xid: int = int(row[0])
        self.outcome: str = row[1]
        self.work_ids: list[int] = sorted(row[2] or [])
        self.record: InstanceRecord | None = (
            instance_record(row[3:]) if self.outcome == "ok" and row[3] is not None else None
        )


def episode_args(
    fence: tuple[int, int] | None,
    instance_id: str,
    expected: str | None,
    completions: list[Completion],
    episode: Episode,
    now: str,
    count_next: bool,
    writer: str,
    channel: str,
    notify: list[str],
) -> tuple[Any, ...]:
    """The episode function's arguments, in its order (``packed`` for its call)."""
    unit, epoch = fence if fence is not None else (None, None)
    activities = [i.payload for i in episode.outbox if i.kind == OutgoingKind.ACTIVITY]
    messages = [i for i in episode.outbox if i.kind != OutgoingKind.ACTIVITY]
    create = episode.replace_history
    return (
        unit,
        epoch,
        instance_id,
        expected,
        [c.work_id for c in completions],
        [None if c.consumed else codec.encode(c.message) for c in completions],
        list(episode.consumed),
        count_next,
        episode.replace_history or episode.rewrite_history,
        [codec.encode(e) for e in episode.events],
        create,
        episode.name if create else None,
        episode.execution_id if create else None,
        episode.version if create else None,
        episode.input_json if create else None,
        codec.parent_instance_id(episode) if create else None,
        now,
        episode.status,
        codec.writes_output(episode),
        episode.output_json,
        episode.custom_status_changed,
        episode.custom_status_json,
        writer,
        [p["execution_id"] for p in activities],
        [p["task_id"] for p in activities],
        [p["name"] for p in activities],
        [p["input_json"] for p in activities],
        [m.target for m in messages],
        [codec.encode(m.payload) for m in messages],
        [m.visible_at for m in messages],
        channel,
        notify,
    )


def prepared() -> dict[str, tuple[str, str]]:
    """The calls every pooled connection prepares (``Database.prepared``): each call's text,
    its statement's name and the statement, whose one parameter is the packed arguments."""
    return {
        call: (f"{function}_call", call.replace("%s::jsonb", "$1::jsonb"))
        for function, _, call in _FUNCTIONS
    }


def packed(args: tuple[Any, ...]) -> tuple[str]:
    """A call's arguments as its one parameter (``_unpacked``)."""
    return (json.dumps(args, ensure_ascii=False, separators=(",", ":")),)


def episode_call() -> str:
    return _EPISODE_CALL


def attempt_call() -> str:
    return _ATTEMPT_CALL


def entity_call() -> str:
    return _ENTITY_CALL


def start_call() -> str:
    return _START_CALL


class StartOutcome:
    """What the start function answered: the transaction id and outcome, the status found
    (``exists``: the id is taken by an instance in a state that may not be overridden),
    the start message's inbox id and the row."""

    __slots__ = ("found_status", "inbox_id", "outcome", "record", "xid")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.xid: int = int(row[0])
        self.outcome: str = row[1]
        self.found_status: str | None = row[2]
        self.inbox_id: int | None = None if row[3] is None else int(row[3])
        self.record: InstanceRecord | None = (
            instance_record(row[4:]) if self.outcome == "ok" else None
        )
