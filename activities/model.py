"""``call_model``: one model call for a session, by reference; ``turn_limits``: the settings.

Input ``{"session_id", "submission_id", "attempt_key", "timeout_s"}``: the activity reads the
transcript from the session entity itself (the orchestration never carries it), resolves content
references, and asks the configured model (``adapters.model_provider``; settings
``AGENT_MODEL_*``). With no endpoint configured the deterministic offline planner answers.

The transcript is the entries of kind ``message``; the other kinds are the kernel's own
records (tool intents and outcomes) and never reach the model.

Returns an envelope, never raises for expected failures (exception types do not survive the
activity boundary): ``{"ok": true, "response": ModelResponse}`` or
``{"ok": false, "kind", "message", "retry_after"}``.

A reply whose text is too long to keep inline is stored in the content store and its
reference returned as ``content_ref`` next to the response.

A successful reply is written to the attempt ledger under ``attempt_key`` before it is
returned, so if the host dies after the call but before its completion is saved, the re-run
activity returns the saved reply instead of paying for the same call again (``"reused": true``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Any

import azure.durable_functions as df

from adapters import model_provider, telemetry
from adapters.attempt_ledger import default_ledger
from adapters.content_store import default_store
from entities import session_pages
from kernel import content, pages, planner, tools
from kernel import session as session_core
from kernel.model_io import ModelFailure, ModelIOError, ModelRequest, ModelResult, ModelSuccess
from kernel.turn_policy import TurnLimits, TurnSettingsError

bp = df.Blueprint()
TRANSCRIPT_KIND = "message"


async def read_entries(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> list[dict[str, Any]]:
    """The transcript as this submission sees it: every message before its own user entry, and
    its own messages - never the entries of submissions queued behind it."""
    head = await session_pages.read_head(client, session_id)
    if head is None:
        return []
    head = session_core.upgrade(head)
    sub = head["submissions"].get(submission_id)
    # The submission's own user entry; entries before it are everyone's, after it only its own.
    first = sub["entry"] if sub is not None else session_core.view_counts(head)["entries"] + 1
    entries = [
        e
        for e in pages.iter_records(head, "entries", session_pages.load_page)
        if (e["n"] < first or e.get("submission_id") == submission_id)
        and e.get("kind", TRANSCRIPT_KIND) == TRANSCRIPT_KIND
    ]
    store = default_store()
    for i, entry in enumerate(entries):
        if entry.get("text") is None and entry.get("content_ref"):
            # A copy: sealed pages are shared through a cache and never change.
            text = await asyncio.to_thread(store.get, entry["content_ref"])
            entries[i] = {**entry, "text": text}
    return entries


def requested_model() -> str:
    config = model_provider.ProviderConfig.from_settings(os.environ)
    return config.model if config is not None else planner.MODEL_NAME


async def ask(entries: list[dict[str, Any]], timeout_s: float) -> ModelResult:
    config = model_provider.ProviderConfig.from_settings(os.environ)
    if config is None:
        return ModelSuccess(planner.plan(entries))
    try:
        request = ModelRequest.from_entries(entries, tools.openai_tool_specs(), config.model)
    except ModelIOError as exc:
        return ModelFailure(kind="fatal", message=f"cannot build the model request: {exc}")
    return await model_provider.complete(config, request, timeout_s)


@bp.activity_trigger(input_name="job")
def turn_limits(job: dict[str, Any]) -> dict[str, Any]:
    """The turn limits from this app's ``AGENT_*`` settings: ``{"ok", "limits"|"message"}``.

    Only the limits travel into orchestration histories, never the other settings (keys).
    """
    try:
        return {"ok": True, "limits": TurnLimits.from_settings(os.environ).to_dict()}
    except TurnSettingsError as exc:
        return {"ok": False, "message": str(exc)}


def _stored_if_long(text: str | None) -> str | None:
    # Entry texts are inline only up to 4 KiB; the orchestrator cannot store, so this does.
    return default_store().put(text) if text is not None and content.needs_reference(text) else None


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def call_model(job: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    ledger = default_ledger()
    key = job["attempt_key"]
    saved = await asyncio.to_thread(ledger.read, key)
    if saved is not None and saved.completed:
        return {**saved.result, "reused": True}
    entries = await read_entries(client, job["session_id"], job["submission_id"])
    with telemetry.model_call(job, requested_model()) as call:
        result: dict[str, Any] = (await ask(entries, float(job.get("timeout_s") or 120))).to_dict()
        call.record(result)
    if result["ok"]:
        text = result["response"].get("content")
        result["content_ref"] = await asyncio.to_thread(_stored_if_long, text)
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        await asyncio.to_thread(ledger.create, key, owner, float(job.get("timeout_s") or 120))
        result = await asyncio.to_thread(ledger.complete, key, result)
    return result
