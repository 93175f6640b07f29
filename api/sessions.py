"""HTTP API of sessions: submit, read the session view, follow changes, read a submission.

Every error is a JSON body ``{"error", "message", "field"}`` with status 400/404/409, and a
rejected request stores nothing. Submissions are idempotent by ``requestId``: the
orchestration id is derived from it (``{session}:turn:{uuid5(session, requestId)}``), so a
retry finds the original instead of starting a second run.
"""

from __future__ import annotations

import json
import os
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters.content_store import default_store
from kernel import content, ids
from kernel import session as core
from kernel.errors import KernelError, ValidationError

bp = df.Blueprint()
MAX_TEXT = 32_000


def reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(body), status_code=status, mimetype="application/json", headers=headers)


def error(code: str, message: str, field: str | None, status: int) -> func.HttpResponse:
    return reply({"error": code, "message": message, "field": field}, status)


def _body(req: func.HttpRequest) -> dict[str, Any]:
    try:
        body = req.get_json()
    except ValueError as exc:
        raise ValidationError("invalid_json", "the request body is not valid JSON", None) from exc
    if not isinstance(body, dict):
        raise ValidationError("invalid_body", "the request body must be a JSON object", None)
    return body


def _submission_input(session_id: str, body: dict[str, Any]) -> dict[str, Any]:
    request_id = ids.validate_request_id(body.get("requestId"), "requestId")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("empty_text", "text must be a non-empty string", "text")
    if len(text) > MAX_TEXT:
        raise ValidationError("text_too_long", f"text is longer than {MAX_TEXT} characters", "text")
    job: dict[str, Any] = {
        "session_id": session_id,
        "request_id": request_id,
        "submission_id": ids.submission_id(session_id, request_id),
    }
    if content.needs_reference(text):
        job["text_ref"] = default_store().put(text)  # stored once; histories carry the ref
    else:
        job["text"] = text
    return job


async def read_state(client: df.DurableOrchestrationClient, session_id: str) -> dict[str, Any] | None:
    state = await client.read_entity_state(df.EntityId("session", session_id))
    if not state.entity_exists or state.entity_state is None:
        return None
    raw = state.entity_state
    return json.loads(raw) if isinstance(raw, str) else raw


def links(req: func.HttpRequest, session_id: str, submission_id: str) -> dict[str, str]:
    root = req.url.split("/api/")[0] + "/api"
    return {
        "session": f"{root}/sessions/{session_id}",
        "submission": f"{root}/sessions/{session_id}/submissions/{submission_id}",
        "changes": f"{root}/sessions/{session_id}/changes?after=0",
    }


@bp.route(route="sessions/{sessionId}/submissions", methods=["POST"])
@bp.durable_client_input(client_name="client")
async def submit(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
        job = _submission_input(session_id, _body(req))
    except KernelError as exc:
        return reply(exc.to_dict(), exc.http_status)
    instance_id = ids.turn_instance_id(session_id, job["submission_id"])
    job["settings"] = {k: v for k, v in os.environ.items() if k.startswith("AGENT_")}
    existing = await client.get_status(instance_id)
    duplicate = bool(existing and existing.runtime_status)
    if not duplicate:
        try:
            await client.start_new("agent_turn", instance_id, job)
        except Exception:  # noqa: BLE001 - a concurrent duplicate started it first
            duplicate = True
    body = {"submissionId": job["submission_id"], "sessionId": session_id, "duplicate": duplicate,
            "instanceId": instance_id, **links(req, session_id, job["submission_id"])}
    return reply(body, 202, {"Location": body["submission"]})


@bp.route(route="sessions/{sessionId}", methods=["GET"])
@bp.durable_client_input(client_name="client")
async def get_session(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
    except KernelError as exc:
        return reply(exc.to_dict(), exc.http_status)
    state = await read_state(client, session_id)
    if state is None:
        return error("session_not_found", f"no session {session_id!r}", "sessionId", 404)
    return reply(core.view(state))


@bp.route(route="sessions/{sessionId}/submissions/{submissionId}", methods=["GET"])
@bp.durable_client_input(client_name="client")
async def get_submission(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    try:
        session_id = ids.validate_session_id(req.route_params.get("sessionId"), "sessionId")
        state = await read_state(client, session_id)
        if state is None:
            return error("session_not_found", f"no session {session_id!r}", "sessionId", 404)
        return reply(core.submission_view(state, req.route_params.get("submissionId", "")))
    except KernelError as exc:
        return reply(exc.to_dict(), exc.http_status)
