"""``purge_settled``: purge the orchestration histories of a session's settled submissions. IO.

Input ``{"session_id", "turn_instance_id"}`` (the caller's own turn, never purged). Reads the
retention from the app setting ``AGENT_HISTORY_RETENTION`` (``kernel.session.retention``; the setting
stays out of histories), then:

1. lists the session's turns created at or before ``now - retention`` (one instance-id-prefix
   query with a creation-time bound: what is listed is what may go, plus turns still running);
2. reads the session head once and picks the settled submissions (``settled_submissions``);
3. for each, lists the instances under ``{turn}:`` and ``{submission}:``; when all have ended it
   purges them, children first and the turn last (``purge_order``); when one still runs it
   leaves the whole submission for a later pass.

Returns ``{"ok": true, "purged": n, "submissions": [...], "kept": [...]}``, ``{"ok": true,
"purged": 0, "retention": "off"}``, or ``{"ok": false, "message"}`` for a bad setting (nothing
is purged) or a failure of the store (the next pass tries again). Never raises.

Idempotent and crash-safe: purging an instance that is gone answers 404, counted as 0; a pass
cut short by a crash left the turn (purged last), so the next pass - the activity run again
after a restart, or the next submission's pass - finds the submission again and purges the rest.

Crash point for tests: ``KERNEL_FAULTS="retention.after_purge@n"`` kills the process after the
n-th instance purged by this process.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df

from activities.tools import crash_point
from adapters import workspace_store
from entities import session_pages
from kernel.session import retention
from kernel.session.state import decode_entity_state
from kernel.workspace import files as workspace

bp = df.Blueprint()
log = logging.getLogger(__name__)


def _utc(moment: datetime | None) -> datetime | None:
    # A time without an offset is UTC (the management API's times are).
    return moment.replace(tzinfo=UTC) if moment and moment.tzinfo is None else moment


def _instance(status: Any) -> retention.Instance:
    runtime = status.runtime_status.value if status.runtime_status else None
    return retention.Instance(
        status.instance_id, runtime, _utc(status.created_time), _utc(status.last_updated_time)
    )


async def _listed(client: df.DurableOrchestrationClient, **query: Any) -> list[retention.Instance]:
    return [_instance(s) for s in await client.get_status_by(**query) if s.instance_id]


async def purge_submission(
    client: df.DurableOrchestrationClient, session_id: str, sub_id: str
) -> int | None:
    """Purge one settled submission's instances; None when one still runs (nothing purged)."""
    turn_id = f"{session_id}:turn:{sub_id}"
    under: dict[str, retention.Instance] = {}
    for prefix in (f"{turn_id}:", f"{sub_id}:"):
        for found in await _listed(client, instance_id_prefix=prefix):
            under[found.instance_id] = found
    order = retention.purge_order(turn_id, under.values())
    if order is None:
        return None
    purged = 0
    for instance_id in order:
        result = await client.purge_instance_history(instance_id)
        purged += result.instances_deleted
        crash_point("retention.after_purge")
    return purged


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def purge_settled(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    try:
        kept_for = retention.from_settings(os.environ)
    except retention.RetentionSettingsError as exc:
        log.error("history retention: %s; nothing is purged", exc)
        return {"ok": False, "message": str(exc)}
    if kept_for is None:
        return {"ok": True, "purged": 0, "retention": "off"}
    session_id = str(job["session_id"])
    cutoff = datetime.now(UTC) - kept_for
    try:
        turns = await _listed(
            client, instance_id_prefix=f"{session_id}:turn:", created_time_to=cutoff
        )
        if not any(turn.ended for turn in turns):
            return {"ok": True, "purged": 0, "submissions": [], "kept": []}
        state = decode_entity_state(
            await client.read_entity_state(df.EntityId("session", session_id))
        )
        settled = retention.settled_submissions(turns, state, str(job["turn_instance_id"]), cutoff)
        purged, done, kept = 0, [], []
        for sub_id in settled:
            count = await purge_submission(client, session_id, sub_id)
            if count is None:
                kept.append(sub_id)
            else:
                purged += count
                done.append(sub_id)
    except Exception as exc:  # noqa: BLE001 - the SDK raises bare Exceptions; a later pass retries
        log.warning("history retention of session %s failed: %s", session_id, exc)
        return {"ok": False, "message": f"purge failed: {exc}"[:500]}
    pruned = await asyncio.to_thread(_prune_workspace, session_id, state)
    return {"ok": True, "purged": purged, "submissions": done, "kept": kept, **pruned}


def _prune_workspace(session_id: str, state: Any) -> dict[str, int]:
    """The session's workspace snapshots beyond its newest ``AGENT_WORKSPACE_KEEP_SNAPSHOTS``
    (default 50) go with its old histories (docs/workspace.md, "Retention"); a failure only
    leaves them for the next pass."""
    try:
        keep = max(1, int(os.environ.get("AGENT_WORKSPACE_KEEP_SNAPSHOTS") or 50))
        head, _ = workspace.committed(session_pages.document(state, workspace.WORKSPACE_DOCUMENT))
        return {"snapshots_pruned": workspace_store.default_store().prune(head, keep)}
    except Exception as exc:  # noqa: BLE001 - retention never fails a turn
        log.warning("workspace retention of session %s failed: %s", session_id, exc)
        return {"snapshots_pruned": 0}
