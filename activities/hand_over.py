"""``hand_over``: raise the per-submission event that gives a queued submission its turn.

Input ``{"instance_id", "event"}``; returns ``"raised"`` or ``"not delivered: ..."``, never
raises. A target that is gone or unknown needs no hand-over. Any other failure is retried a
few times; if the event still cannot be raised, the waiting orchestration's polling timer
finds its turn anyway (``agent_turn``), so a lost hand-over delays a turn but never loses it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import azure.durable_functions as df

bp = df.Blueprint()
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
