"""Activities of a background model call: submit it, poll it, cancel it (``docs/turn.md``).

The provider is ``adapters.model_background`` (the Responses API when ``AGENT_MODEL_BASE_URL``
is set, else the offline planner). Every activity returns an envelope and never raises for
provider trouble; the orchestration side is ``orchestrators/model_wait.py``.

* ``submit_model_request {session_id, submission_id, attempt_key, timeout_s}``: reads the
  transcript like ``call_model`` (by reference, never carried by the orchestration), starts a
  background request and returns ``{"ok": true, "handle": {"provider", "id"}, "status"}`` or a
  failure envelope ``{"ok": false, "kind", "message", "retry_after"}``. The handle is written
  to the attempt ledger under ``{attempt_key}:submit`` before it is returned, so a re-run of
  the activity (the host died before its completion was saved) reuses it (``"reused": true``)
  instead of starting a second request.
* ``poll_model_request {handle, session_id, submission_id, timeout_s}``: first reads the
  submission: a cancel requested for it (or a submission already final) answers
  ``{"status": "cancel_requested", "reason"}`` without asking the provider, so the
  orchestration records its intent before it cancels. Else the request's status (the
  ``Polled`` shape: ``queued``, ``in_progress``, ``unknown`` with a transient ``message``,
  ``completed`` with ``ok``/``response`` and ``content_ref`` for a long text, ``failed`` or
  ``cancelled`` with the failure envelope).
* ``cancel_model_request {handle, timeout_s}``: asks the provider to stop the request; its
  status afterwards (the same shape, without a response).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Any

import azure.durable_functions as df

from activities import mcp as mcp_activities
from activities.model import read_entries
from adapters import model_background
from adapters.attempt_ledger import default_ledger
from adapters.content_store import default_store
from adapters.model_provider import ProviderConfig
from entities import session_pages
from kernel.common import content
from kernel.turn import mcp_catalogue, planner, tools
from kernel.turn.model_io import ModelFailure, ModelIOError, ModelRequest

bp = df.Blueprint()
DEFAULT_TIMEOUT_S = 120.0


def _timeout(job: dict[str, Any]) -> float:
    return float(job.get("timeout_s") or DEFAULT_TIMEOUT_S)


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def submit_model_request(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    ledger = default_ledger()
    key = f"{job['attempt_key']}:submit"
    saved = await asyncio.to_thread(ledger.read, key)
    if saved is not None and saved.completed:
        return {**saved.result, "reused": True}
    entries = await read_entries(client, job["session_id"], job["submission_id"])
    config = ProviderConfig.from_settings(os.environ)
    model = config.model if config is not None else planner.MODEL_NAME
    try:
        allowed = job.get("tools") or None
        offered = tools.openai_tool_specs(allowed) + mcp_catalogue.openai_specs(
            await mcp_activities.catalogue_of(job), allowed
        )
        request = ModelRequest.from_entries(entries, offered, model)
    except ModelIOError as exc:
        failure = ModelFailure(kind="fatal", message=f"cannot build the model request: {exc}")
        return dict(failure.to_dict())
    provider = model_background.provider_for(config, default_store())
    submitted = await provider.submit(request, _timeout(job))
    if isinstance(submitted, ModelFailure):
        return dict(submitted.to_dict())
    result = {"ok": True, "handle": submitted.handle.to_dict(), "status": submitted.status}
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    await asyncio.to_thread(ledger.create, key, owner, _timeout(job))
    return dict(await asyncio.to_thread(ledger.complete, key, result))


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def poll_model_request(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    cancel = await session_pages.stop_reason(client, job["session_id"], job["submission_id"])
    if cancel is not None:
        return {"status": "cancel_requested", "reason": cancel}
    handle = model_background.Handle.from_dict(job["handle"])
    provider = _provider(handle)
    if provider is None:
        return _no_provider(handle)
    out = (await provider.poll(handle, _timeout(job))).to_dict()
    if out.get("ok"):
        text = out["response"].get("content")
        out["content_ref"] = await asyncio.to_thread(_stored_if_long, text)
    return out


@bp.activity_trigger(input_name="job")
async def cancel_model_request(job: dict[str, Any]) -> dict[str, Any]:
    handle = model_background.Handle.from_dict(job["handle"])
    provider = _provider(handle)
    if provider is None:
        return _no_provider(handle)
    out = (await provider.cancel(handle, _timeout(job))).to_dict()
    out.pop("response", None)  # only the status matters to a cancel; keep histories small
    return out


def _provider(handle: model_background.Handle) -> model_background.BackgroundProvider | None:
    config = ProviderConfig.from_settings(os.environ)
    return model_background.provider_of(handle, config, default_store())


def _no_provider(handle: model_background.Handle) -> dict[str, Any]:
    message = f"no model endpoint is configured for the {handle.provider} request {handle.id}"
    failure = ModelFailure(kind="fatal", message=message)
    return {"status": "failed", **failure.to_dict()}


def _stored_if_long(text: str | None) -> str | None:
    # Entry texts are inline only up to 4 KiB; the orchestrator cannot store, so this does.
    return default_store().put(text) if text is not None and content.needs_reference(text) else None
