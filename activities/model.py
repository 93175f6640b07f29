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

Previews (``AGENT_PREVIEWS=on``, ``docs/turn.md`` "Streaming and previews"): the call streams,
and the text so far is written, coalesced, to the preview store under the round's task
(``adapters.previews``); the offline planner streams its answer in word chunks too
(``AGENT_PLANNER_STREAM_DELAY_MS`` apart). The activity's result is the complete reply either
way, so what enters the history does not depend on streaming. A failed call clears its preview;
a successful one leaves it until the commit of the response supersedes it.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import uuid
from typing import Any, cast

import azure.durable_functions as df

from activities import environment
from activities import mcp as mcp_activities
from adapters import mcp_client, model_provider, telemetry
from adapters import previews as preview_store
from adapters.attempt_ledger import default_ledger
from adapters.content_store import default_store
from entities import session_pages
from kernel.common import content
from kernel.session import pages
from kernel.session import previews as preview_rules
from kernel.session import reducer as session_core
from kernel.turn import mcp_catalogue, planner, tools
from kernel.turn.mcp_config import McpConfigError
from kernel.turn.model_io import ModelFailure, ModelIOError, ModelRequest, ModelResult, ModelSuccess
from kernel.turn.policy import TurnLimits, TurnSettingsError

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


async def ask(
    entries: list[dict[str, Any]],
    timeout_s: float,
    on_text: model_provider.TextSink | None = None,
    planner_delay_s: float = 0.0,
    allowed_tools: list[str] | None = None,
    catalogue: dict[str, Any] | None = None,
) -> ModelResult:
    """One model call; ``allowed_tools`` narrows the tools offered (a loop's declaration;
    None offers the whole catalogue)."""
    config = model_provider.ProviderConfig.from_settings(os.environ)
    if config is None:
        response = planner.plan(entries)
        if on_text is not None and response.content:
            await stream_planner_text(response.content, on_text, planner_delay_s)
        return ModelSuccess(response)
    offered = tools.openai_tool_specs(allowed_tools) + mcp_catalogue.openai_specs(
        catalogue, allowed_tools
    )
    try:
        request = ModelRequest.from_entries(entries, offered, config.model)
    except ModelIOError as exc:
        return ModelFailure(kind="fatal", message=f"cannot build the model request: {exc}")
    return await model_provider.complete(config, request, timeout_s, on_text)


_CHUNK = re.compile(r"\s*\S+")


async def stream_planner_text(text: str, on_text: model_provider.TextSink, delay_s: float) -> None:
    """The planner's answer as a model would stream it: word by word, ``delay_s`` apart."""
    shown = 0
    for i, chunk in enumerate(_CHUNK.finditer(text)):
        if i and delay_s:
            await asyncio.sleep(delay_s)
        shown = chunk.end()
        on_text(text[:shown])
    if shown < len(text):  # trailing whitespace
        on_text(text)


def model_preview(job: dict[str, Any], interval_s: float) -> preview_store.PreviewWriter | None:
    """The preview writer of this call's round, or None (previews off, or not a round's call)."""
    found = preview_rules.model_preview_task(job["session_id"], job["attempt_key"])
    if found is None:
        return None
    task, submission_id, round_no = found
    store = preview_store.open_store()
    if store is None:
        return None
    return preview_store.PreviewWriter(
        store,
        session_id=job["session_id"],
        task=task,
        kind=preview_rules.MODEL_TEXT,
        submission_id=submission_id,
        round_no=round_no,
        interval_s=interval_s,
    )


@bp.activity_trigger(input_name="job")
def turn_limits(job: dict[str, Any]) -> dict[str, Any]:
    """The turn limits from this app's ``AGENT_*`` settings: ``{"ok", "limits", "environment"}``
    or ``{"ok": false, "message"}``.

    Only the limits travel into orchestration histories, never the other settings (keys).
    """
    try:
        limits = TurnLimits.from_settings(os.environ).to_dict()
        servers = mcp_client.servers()
    except (TurnSettingsError, McpConfigError) as exc:
        return {"ok": False, "message": str(exc)}
    # The environment the turn starts in (docs/workspace.md): recorded with the limits, so a
    # run whose history holds limits without it (started before) replays unchecked. The MCP
    # servers' names only (no secrets): the run lists their tools next (docs/tools.md).
    mcp = {"mcp": [server.name for server in servers]} if servers else {}
    return {"ok": True, "limits": limits, "environment": environment.current(), **mcp}


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
    streaming = preview_store.settings()
    preview = model_preview(job, streaming.interval_s) if streaming.enabled else None
    result: dict[str, Any] = {"ok": False}
    try:
        with telemetry.model_call(job, requested_model()) as call:
            result = (
                await ask(
                    entries,
                    float(job.get("timeout_s") or 120),
                    preview.update if preview is not None else None,
                    streaming.planner_delay_s,
                    job.get("tools") or None,
                    await mcp_activities.catalogue_of(job),
                )
            ).to_dict()
            call.record(result)
    finally:
        if preview is not None:
            # A failed call's partial text means nothing; a reply's preview stays until the
            # commit of the response supersedes it (no gap in which neither is visible).
            await preview.aclose(clear=not result["ok"])
    if result["ok"]:
        text = cast(dict[str, Any], result["response"]).get("content")
        result["content_ref"] = await asyncio.to_thread(_stored_if_long, text)
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        await asyncio.to_thread(ledger.create, key, owner, float(job.get("timeout_s") or 120))
        result = await asyncio.to_thread(ledger.complete, key, result)
    return result
