"""``hand_over``: raise the per-submission event that gives a queued submission its turn.

Input ``{"instance_id", "event"}``; returns ``"raised"`` or ``"not delivered: ..."``, never
raises. A target that is gone or unknown needs no hand-over. Any other failure is retried a
few times; if the event still cannot be raised, the waiting orchestration's polling timer
finds its turn anyway (``agent_turn``), so a lost hand-over delays a turn but never loses it.

``active_turn`` tells a turn whether the session's active submission still has a live turn:
one that an operator terminated, or that the host quarantined, ended without finishing its
submission, and ``agent_turn`` then finishes it and passes the turn on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import azure.durable_functions as df

from kernel.common import ids
from kernel.common.statuses import ENDED_RUNTIME_STATUSES
from kernel.common.text import scrub
from kernel.session.state import decode_entity_state

bp = df.Blueprint()
OUTPUT_CHARS = 300
ATTEMPTS = 3
BACKOFF_SECONDS = 0.5
_FINAL_ANSWERS = ("is gone", "not found", "No instance")


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def hand_over(job: dict[str, Any], client: df.DurableOrchestrationClient) -> str:
    error = ""
    for attempt in range(ATTEMPTS):
        try:
            await client.raise_event(job["instance_id"], job["event"], "go")
            return "raised"
        except Exception as exc:  # noqa: BLE001 - the SDK raises bare Exceptions
            error = str(exc)
            if any(text in error for text in _FINAL_ANSWERS) or attempt + 1 == ATTEMPTS:
                break
        await asyncio.sleep(BACKOFF_SECONDS * (attempt + 1))
    return f"not delivered: {error}"


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def active_turn(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    """``{session_id}`` -> the session's active submission and the state of its turn.

    ``{"submission_id", "turn_instance_id", "runtime_status"}`` (``submission_id`` None when the
    session is idle or unknown; ``runtime_status`` None when the turn's instance is not found).
    When the turn has ended (``ENDED_RUNTIME_STATUSES``), also ``output`` (its last words, short) and ``live``:
    the instances under it that still run (its run, rounds and tool tasks), which the caller
    terminates once it has finished the submission. A read only: safe to run again.
    """
    session_id = job["session_id"]
    state = decode_entity_state(await client.read_entity_state(df.EntityId("session", session_id)))
    active = (state or {}).get("active_submission")
    if not active:
        return {"submission_id": None, "turn_instance_id": None, "runtime_status": None}
    turn = ids.turn_instance_id(session_id, active)
    status = await client.get_status(turn)
    runtime = status.runtime_status.value if status and status.runtime_status else None
    seen: dict[str, Any] = {"submission_id": active, "turn_instance_id": turn}
    seen["runtime_status"] = runtime
    if runtime in ENDED_RUNTIME_STATUSES:
        seen["output"] = scrub(str(status.output))[:OUTPUT_CHARS]
        live: set[str] = set()
        for prefix in (f"{turn}:", f"{active}:"):
            for child in await client.get_status_by(instance_id_prefix=prefix):
                if (
                    child.runtime_status
                    and child.runtime_status.value not in ENDED_RUNTIME_STATUSES
                ):
                    live.add(child.instance_id)
        seen["live"] = sorted(live)
    return seen
