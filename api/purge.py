"""Deleting a session: its ``session`` entity and every orchestration instance it owns. IO.

A session owns the instances whose ids start with ``{session}:`` (its turns and their children)
or with ``{submission}:`` for one of its submissions (tool tasks). The steps, and why:

1. 404 when there is neither a session nor any instance of it; 409 ``session_busy`` while a
   submission is active or queued.
2. Wait (bounded) until every owned instance has ended: the turn of a final submission may
   still be handing over for a moment. One still running at the deadline -> 409.
3. Signal the entity ``delete {cursor}`` with the cursor read after that wait, then watch the
   stored state. The entity deletes only an idle session still at that cursor, so the outcome
   is decided by the entity alone: the state is gone -> deleted; the cursor moved (same
   ``created_at``) -> something was accepted in between and the delete was refused -> 409.
4. Purge the ended instances, so nothing of the session remains and a retry of an old
   ``requestId`` starts a new submission.

Content stored by reference stays: it is content-addressed and may be shared by sessions.
Every wait polls with a deadline; no lock is held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import azure.durable_functions as df

from entities import session_pages
from kernel.common.errors import ConflictError, NotFoundError
from kernel.common.statuses import ENDED_RUNTIME_STATUSES
from kernel.session import pages
from kernel.session import reducer as core

SETTLE_SECONDS = 5.0
CONFIRM_SECONDS = 10.0
POLL_SECONDS = 0.1
MAX_PURGE_ROUNDS = 20

StateReader = Callable[[df.DurableOrchestrationClient, str], Awaitable[dict[str, Any] | None]]


def owned_prefixes(session_id: str, state: dict[str, Any] | None) -> list[str]:
    subs = list((state or {}).get("submissions", {}))
    if state is not None and "pages" in state:  # submissions sealed out of the head
        subs += pages.sealed_submission_ids(state, session_pages.load_page)
    return [f"{session_id}:", *(f"{sub}:" for sub in subs)]


def busy() -> ConflictError:
    return ConflictError("session_busy", "a submission is active or queued; retry when idle", None)


async def instances(client: df.DurableOrchestrationClient, prefixes: list[str]) -> list[Any]:
    found: dict[str, Any] = {}
    for prefix in prefixes:
        for status in await client.get_status_by(instance_id_prefix=prefix):
            found[status.instance_id] = status
    return list(found.values())


def _ended(status: Any) -> bool:
    return (
        status.runtime_status is not None and status.runtime_status.value in ENDED_RUNTIME_STATUSES
    )


async def settle(client: df.DurableOrchestrationClient, prefixes: list[str]) -> list[Any]:
    """The owned instances once every one has ended, or ``session_busy``."""
    deadline = time.monotonic() + SETTLE_SECONDS
    for _ in range(int(SETTLE_SECONDS / POLL_SECONDS) + 1):
        found = await instances(client, prefixes)
        if all(_ended(s) for s in found):
            return found
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    raise busy()


async def delete_entity(
    client: df.DurableOrchestrationClient,
    session_id: str,
    state: dict[str, Any],
    read_state: StateReader,
) -> None:
    await client.signal_entity(
        df.EntityId("session", session_id), "delete", {"cursor": state["cursor"]}
    )
    deadline = time.monotonic() + CONFIRM_SECONDS
    for _ in range(int(CONFIRM_SECONDS / POLL_SECONDS) + 1):
        now = await read_state(client, session_id)
        if now is None or now.get("created_at") != state["created_at"]:
            return
        if now["cursor"] != state["cursor"]:
            raise busy()
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    raise ConflictError(
        "delete_pending", "the session did not confirm the delete in time; retry", None
    )


async def purge_ended(client: df.DurableOrchestrationClient, prefixes: list[str]) -> int:
    """Purge every ended owned instance; repeat while a listing may have been a partial page."""
    purged = 0
    for _ in range(MAX_PURGE_ROUNDS):
        ended = [s.instance_id for s in await instances(client, prefixes) if _ended(s)]
        if not ended:
            break
        for instance_id in ended:
            result = await client.purge_instance_history(instance_id)
            purged += result.instances_deleted
    return purged


async def delete_session(
    client: df.DurableOrchestrationClient, session_id: str, read_state: StateReader
) -> int:
    """Delete the session and purge what it owns; the number of instances purged."""
    state = await read_state(client, session_id)
    prefixes = owned_prefixes(session_id, state)
    if state is not None and not core.is_idle(state):
        raise busy()
    owned = await settle(client, prefixes)
    if state is None and not owned:
        raise NotFoundError("session_not_found", f"no session {session_id!r}", "sessionId")
    state = await read_state(client, session_id)
    if state is not None:
        if not core.is_idle(state):
            raise busy()
        await delete_entity(client, session_id, state, read_state)
    return await purge_ended(client, prefixes)
