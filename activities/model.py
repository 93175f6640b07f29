"""``call_model``: one model call for a session, by reference.

Input ``{"session_id", "submission_id"}``: the activity reads the transcript from the session entity itself
(the orchestration never carries it), resolves content references, and asks the configured
model. With no endpoint configured (``AGENT_MODEL_BASE_URL`` unset) the deterministic offline
planner answers. Returns an envelope: ``{"ok": true, "response": ModelResponse}`` or
``{"ok": false, "kind", "message", "retry_after"}`` - exception types do not survive the
activity boundary, so expected failures are data.
"""

from __future__ import annotations

import json
from typing import Any

import azure.durable_functions as df

from adapters.content_store import default_store
from kernel import planner

bp = df.Blueprint()


async def read_entries(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> list[dict[str, Any]]:
    """The transcript as this submission sees it: everything before its own user entry, and
    its own entries - never the entries of submissions queued behind it."""
    state = await client.read_entity_state(df.EntityId("session", session_id))
    raw = state.entity_state if state.entity_exists else None
    data = json.loads(raw) if isinstance(raw, str) else raw
    all_entries = list((data or {}).get("entries", []))
    own = [e["n"] for e in all_entries if e.get("submission_id") == submission_id]
    first = min(own) if own else len(all_entries) + 1
    entries = [e for e in all_entries if e["n"] < first or e.get("submission_id") == submission_id]
    store = default_store()
    for entry in entries:
        if entry.get("text") is None and entry.get("content_ref"):
            entry["text"] = store.get(entry["content_ref"])
    return entries


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def call_model(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    entries = await read_entries(client, job["session_id"], job["submission_id"])
    response = planner.plan(entries)
    return {"ok": True, "response": response.to_dict()}
