"""``hand_over``: raise the per-submission event that gives a queued submission its turn."""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

bp = df.Blueprint()


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def hand_over(job: dict[str, Any], client: df.DurableOrchestrationClient) -> str:
    try:
        await client.raise_event(job["instance_id"], job["event"], "go")
    except Exception as exc:  # noqa: BLE001 - a finished or purged target needs no hand-over
        return f"not delivered: {exc}"
    return "raised"
