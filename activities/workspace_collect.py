"""``collect_workspace``: the workspace content collector on a schedule. IO.

File contents and snapshots are shared by hash across sessions, so only a sweep over every
session can tell which are no longer named (``WorkspaceStore.collect``, docs/workspace.md,
"Retention"). This timer function runs that sweep:

1. lists every orchestration instance (``get_status_all``) and takes the sessions named by
   the ids ``{session}:turn:...`` and ``{session}:workspace:...``: a snapshot is committed by
   a turn's tool task or by an upload, and neither kind of instance is purged while its
   session lives (history retention never purges the newest turn, the one that runs it, nor
   uploads; deleting a session purges them with the session, whose snapshots are then dead);
2. reads each such session's committed snapshot (``read_entity_state``, the ``workspace``
   document);
3. deletes the snapshots and files that no committed chain names (``keep`` deep: the
   ``AGENT_WORKSPACE_KEEP_SNAPSHOTS`` of retention) and that are older than the grace,
   ``AGENT_WORKSPACE_COLLECT_GRACE_S`` (default an hour: a running tool's stored but not yet
   committed files are not taken from under it).

Any failure to list or read aborts the sweep before anything is deleted: a session whose
state could not be read must not look dead. The schedule is the app setting
``AGENT_WORKSPACE_COLLECT_SCHEDULE`` (a six-field NCRONTAB or a TimeSpan, read when the app is
indexed; default ``0 30 3 * * *``, daily at 03:30 in ``WEBSITE_TIME_ZONE``, else UTC);
``AzureWebJobs.collect_workspace.Disabled`` turns it off. Timer runs are once per occurrence
per task hub, so two instances of the app never sweep at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters import workspace_store
from entities import session_pages
from kernel.session.state import decode_entity_state
from kernel.workspace import files as workspace

bp = df.Blueprint()
log = logging.getLogger("agent.workspace")
SCHEDULE_SETTING = "AGENT_WORKSPACE_COLLECT_SCHEDULE"
DEFAULT_SCHEDULE = "0 30 3 * * *"
_OWNED = re.compile(r"^([A-Za-z0-9_-]{1,64}):(?:turn|workspace):")


def sessions_of(instance_ids: list[str]) -> list[str]:
    """The sessions whose turns or uploads these instance ids are, each once, sorted."""
    return sorted({m.group(1) for i in instance_ids if (m := _OWNED.match(i or ""))})


def _number(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    return float(text) if text else default


async def collect(client: df.DurableOrchestrationClient) -> dict[str, int]:
    """One sweep (see the module docstring): what was deleted, and how many sessions live."""
    instances = await client.get_status_all()
    heads: list[str] = []
    sessions = sessions_of([s.instance_id for s in instances if s.instance_id])
    for session_id in sessions:
        state: Any = decode_entity_state(
            await client.read_entity_state(df.EntityId("session", session_id))
        )
        head, _ = workspace.committed(session_pages.document(state, workspace.WORKSPACE_DOCUMENT))
        if head:
            heads.append(head)
    keep = max(1, int(_number("AGENT_WORKSPACE_KEEP_SNAPSHOTS", 50)))
    grace = max(0.0, _number("AGENT_WORKSPACE_COLLECT_GRACE_S", 3600))
    store = workspace_store.default_store()
    deleted = await asyncio.to_thread(store.collect, heads, keep, grace)
    return {**deleted, "sessions": len(sessions), "live": len(heads)}


@bp.timer_trigger(
    schedule=os.environ.get(SCHEDULE_SETTING) or DEFAULT_SCHEDULE,
    arg_name="timer",
    run_on_startup=False,
)
@bp.durable_client_input(client_name="client")
async def collect_workspace(
    timer: func.TimerRequest, client: df.DurableOrchestrationClient
) -> None:
    try:
        outcome = await collect(client)
    except Exception as exc:  # noqa: BLE001 - the SDK raises bare Exceptions; next run retries
        log.warning("workspace collection skipped, nothing deleted: %s", exc)
        return
    log.info(
        "workspace collection: %d snapshots and %d files deleted; %d sessions, %d live chains",
        outcome["snapshots"],
        outcome["files"],
        outcome["sessions"],
        outcome["live"],
    )
