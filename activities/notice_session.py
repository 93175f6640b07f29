"""Activities of the notices workflow that read the session or the app settings.

* ``notices_prepare`` answers, before anything is planned or sent, the questions an
  orchestrator cannot ask itself: is a mail service configured, what are the notice settings
  (``AGENT_NOTICE_<FIELD>``, e.g. ``AGENT_NOTICE_CONFIRM_INTERVAL_S``, JSON numbers), do the
  session, the submission and the parent task exist, and does a body named by ``body_ref``
  exist (stored content or a ``note`` of the session). Returns ``{"ok": true, "settings"}``
  or ``{"ok": false, "error": {error, message, field}}``.
* ``notices_read`` returns the plan document (``{version, data}`` or null) and the status of
  the given task records, so a writer can retry a commit against the current version.

Both read the session through the durable client, so the orchestration history records only
their small answers, never the session state.
"""

from __future__ import annotations

import json
import os
from typing import Any

import azure.durable_functions as df

from activities.mail import MailConfig, load_body, read_session
from entities import session_pages
from kernel.session.task_types import NoticeSettings

bp = df.Blueprint()
SETTING_PREFIX = "AGENT_NOTICE_"


def settings_from_env(environ: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The notice settings named in ``environ`` (unvalidated values), or an error."""
    found: dict[str, Any] = {}
    for name in NoticeSettings.model_fields:
        raw = environ.get(SETTING_PREFIX + name.upper())
        if raw is None:
            continue
        try:
            found[name] = json.loads(raw)
        except ValueError:
            return {}, _error(
                "invalid_setting", f"{SETTING_PREFIX}{name.upper()} is not a number", "settings"
            )
    return found, None


def _error(code: str, message: str, field: str | None) -> dict[str, Any]:
    return {"error": code, "message": message, "field": field}


def check_state(state: dict[str, Any] | None, job: dict[str, Any]) -> dict[str, Any] | None:
    """The first missing precondition in the session state, or None."""
    if state is None:
        return _error("session_not_found", f"no session {job['session_id']!r}", "session_id")
    if job["submission_id"] not in (state.get("submissions") or {}):
        return _error(
            "submission_not_found", f"no submission {job['submission_id']!r}", "submission_id"
        )
    parent = job.get("tool_task_id")
    if parent is not None and parent not in (state.get("tasks") or {}):
        return _error(
            "unknown_parent", f"no task {parent!r} to attach the notices to", "tool_task_id"
        )
    return None


async def _missing_body(
    client: df.DurableOrchestrationClient, session_id: str, ref: str
) -> dict[str, Any] | None:
    if await load_body(client, session_id, ref) is not None:
        return None
    return _error(
        "body_not_found",
        f"{ref!r} names neither stored content nor a note in this session",
        "body_ref",
    )


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def notices_prepare(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    """``{session_id, submission_id, tool_task_id, body_ref}`` -> see the module."""
    if MailConfig.from_env() is None:
        return {
            "ok": False,
            "error": _error(
                "mail_not_configured", "AGENT_MAIL_BASE_URL is not set: no mail service", None
            ),
        }
    settings, problem = settings_from_env(dict(os.environ))
    problem = problem or check_state(await read_session(client, job["session_id"]), job)
    ref = job.get("body_ref")
    if problem is None and ref is not None:
        problem = await _missing_body(client, job["session_id"], ref)
    if problem is not None:
        return {"ok": False, "error": problem}
    return {"ok": True, "settings": settings}


@bp.activity_trigger(input_name="job")
@bp.durable_client_input(client_name="client")
async def notices_read(
    job: dict[str, Any], client: df.DurableOrchestrationClient
) -> dict[str, Any]:
    """``{session_id, plan_id, task_ids}`` -> ``{ok, plan: {version, data} | null, tasks}``."""
    state = await read_session(client, job["session_id"]) or {}
    document = session_pages.document(state, job["plan_id"])
    live = document and not document.get("deleted")
    plan = {"version": document["version"], "data": document["data"]} if document and live else None
    tasks = state.get("tasks") or {}
    statuses = {tid: (tasks.get(tid) or {}).get("status") for tid in job.get("task_ids", [])}
    return {"ok": True, "plan": plan, "tasks": statuses}
