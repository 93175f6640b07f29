"""HTTP API of sessions: submit, read the view, page entries, follow changes, read a
submission, delete.

Every error is a JSON body ``{"error", "message", "field"}`` with status 400/404/409 (410 for a
change cursor that fell off the log), and a rejected request stores nothing. Full reference:
docs/api.md and docs/openapi.yaml.

Submissions are idempotent by ``requestId``: the submission id is
``uuid5(session, requestId)`` and the orchestration id ``{session}:turn:{submission}``, so a
retry finds the original instead of starting a second run:
* a submission the session already holds, or an orchestration that already exists, is
  answered as a duplicate and nothing is started (never ``start_new`` on an existing id: the
  Durable extension would restart a completed instance);
* two concurrent first requests may both call ``start_new``; the loser gets a conflict, or
  restarts an instance that just completed, whose ``accept`` is then a first-wins duplicate that
  runs nothing (``orchestrators/agent_turn.py``).

A session exists once a submission is accepted (HTTP 202): until its first commit lands, the
view is the empty session at cursor 0 and the change stream waits from there.

The session entity's state is a head (``kernel.session.pages``): the view shows what is recent, and the
entries, change and submission reads reach older records through sealed pages on demand.

Previews (``kernel.session.previews``, docs/turn.md "Streaming and previews"): every change answer
carries the session's live previews (``previews``, each marked ``"preview": true``) and their
``previewTag``; a reader that passes the tag it holds (``previews=<tag>``, or ``previews=`` for
none) is answered early when the live previews differ from it, not only when records arrive.
Previews are read from the preview store, never from the entity, and are judged against the
state read after them, so an answer never shows an entry together with the preview it
superseded; superseded previews are deleted by the reader that finds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from adapters import previews as preview_store
from adapters.content_store import default_store
from api import inputs, principals, purge
from api.replies import failure, reply
from entities import session_pages
from kernel.common import content, ids
from kernel.common.errors import ConflictError, KernelError, NotFoundError
from kernel.session import previews as preview_rules
from kernel.session import reducer as core
from kernel.session.submissions import MAX_QUEUED_SUBMISSIONS

bp = df.Blueprint()
LEVEL = func.AuthLevel.FUNCTION  # every route: a function key (docs/security.md)
POLL_SECONDS = 0.2
RUNNING = [OrchestrationRuntimeStatus.Pending, OrchestrationRuntimeStatus.Running]


def not_found(session_id: str) -> NotFoundError:
    return NotFoundError("session_not_found", f"no session {session_id!r}", "sessionId")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


read_state = session_pages.read_head


async def accepted_not_committed(client: df.DurableOrchestrationClient, session_id: str) -> bool:
    """True when a turn of the session was started but the session has no state yet."""
    running = await client.get_status_by(
        instance_id_prefix=f"{session_id}:turn:", runtime_status=RUNNING
    )
    return bool(running)


async def current_state(
    client: df.DurableOrchestrationClient,
    session_id: str,
    who: principals.Caller = principals.ANYONE,
) -> dict[str, Any]:
    """The session's state, the empty session while its first submission is in flight, or 404
    (also when the session belongs to another principal)."""
    state = await read_state(client, session_id)
    principals.check(who, state, session_id)
    if state is not None:
        return state
    if await accepted_not_committed(client, session_id):
        return core.new_state(session_id, _now())
    raise not_found(session_id)


def links(req: func.HttpRequest, session_id: str, submission_id: str) -> dict[str, str]:
    root = req.url.split("/api/")[0] + "/api"
    return {
        "session": f"{root}/sessions/{session_id}",
        "submission": f"{root}/sessions/{session_id}/submissions/{submission_id}",
        "changes": f"{root}/sessions/{session_id}/changes?after=0",
        "page": f"{root}/sessions/{session_id}/page",
    }


def api_root(req: func.HttpRequest) -> str:
    return req.url.split("/api/")[0] + "/api"


# --- submit ---------------------------------------------------------------------------


def submission_job(
    session_id: str, submission: inputs.Submission, owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``agent_turn`` input; a long text is stored first and travels by reference."""
    job: dict[str, Any] = {
        "session_id": session_id,
        "request_id": submission.request_id,
        "submission_id": ids.submission_id(session_id, submission.request_id),
        **(owner or {}),
        **submission.options,  # a loop run's tools and policy (agent_run applies them)
        # The turn purges settled histories at its end (history retention) only when its input
        # says so: turns started before carry no flag and replay unchanged.
        "purge_settled": True,
    }
    if content.needs_reference(submission.text):
        job["text_ref"] = default_store().put(submission.text)
    else:
        job["text"] = submission.text
    return job


async def known_status(
    client: df.DurableOrchestrationClient,
    state: dict[str, Any] | None,
    session_id: str,
    submission_id: str,
) -> str | None:
    """The status of a submission that exists already (held by the session or started)."""
    held = (state or {}).get("submissions", {}).get(submission_id)
    if held is not None:
        return str(held["status"])
    # Sealed out of the head: its turn's history may have been purged (history retention).
    sealed = session_pages.sealed_submission(state, submission_id) if state else None
    if sealed is not None:
        return str(sealed["submission"]["status"])
    existing = await client.get_status(ids.turn_instance_id(session_id, submission_id))
    return "accepted" if existing and existing.runtime_status else None


def check_room(state: dict[str, Any] | None) -> None:
    if state is not None and len(state.get("turn_queue", [])) >= MAX_QUEUED_SUBMISSIONS:
        raise ConflictError(
            "queue_full", f"{MAX_QUEUED_SUBMISSIONS} submissions already wait", "requestId"
        )


async def start_once(
    client: df.DurableOrchestrationClient,
    session_id: str,
    submission: inputs.Submission,
    who: principals.Caller = principals.ANYONE,
) -> tuple[str, str, bool]:
    """(submission id, status, duplicate): start the submission's turn unless it exists."""
    sub_id = ids.submission_id(session_id, submission.request_id)
    state = await read_state(client, session_id)
    principals.check(who, state, session_id)
    existing = await known_status(client, state, session_id, sub_id)
    if existing is not None:
        return sub_id, existing, True
    check_room(state)
    job = submission_job(session_id, submission, who.owner_fields())
    try:
        await client.start_new("agent_turn", ids.turn_instance_id(session_id, sub_id), job)
    except Exception:  # the SDK raises bare Exceptions; see below
        # A concurrent first request started it a moment ago; anything else is a real failure.
        if await known_status(client, None, session_id, sub_id) is None:
            raise
        return sub_id, "accepted", True
    return sub_id, "accepted", False


@bp.route(route="sessions/{sessionId}/submissions", methods=["POST"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def submit(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        who = principals.caller(req)
        submission = inputs.submission(req.get_body())
        sub_id, status, duplicate = await start_once(client, session_id, submission, who)
    except KernelError as exc:
        return failure(exc)
    body: dict[str, Any] = {
        "submissionId": sub_id,
        "sessionId": session_id,
        "status": status,
        "duplicate": duplicate,
        "instanceId": ids.turn_instance_id(session_id, sub_id),
        **links(req, session_id, sub_id),
    }
    return reply(body, 202, {"Location": body["submission"]})


# --- reads ----------------------------------------------------------------------------


@bp.route(route="sessions/{sessionId}", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_session(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        body = core.view(await current_state(client, session_id, principals.caller(req)))
    except KernelError as exc:
        return failure(exc)
    base = f"{api_root(req)}/sessions/{session_id}"
    body["links"] = {"entries": f"{base}/entries?after=0", "changes": f"{base}/changes?after=0"}
    return reply(body)


@bp.route(route="sessions/{sessionId}/entries", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_entries(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    """Entries with ``n`` > ``after``, oldest first, at most ``limit`` (default 1,000)."""
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        after, limit = inputs.entries_query(req.params)
        state = await current_state(client, session_id, principals.caller(req))
        entries = core.entries_after(state, after, limit, session_pages.load_page)
    except KernelError as exc:
        return failure(exc)
    last = core.view_counts(state)["entries"]
    cursor = entries[-1]["n"] if entries else after
    body: dict[str, Any] = {
        "sessionId": session_id, "after": after, "cursor": cursor, "latest": last,
        "entries": entries, "next": None,
    }  # fmt: skip
    if cursor < last:
        body["next"] = f"{api_root(req)}/sessions/{session_id}/entries?after={cursor}" + (
            f"&limit={limit}" if limit else ""
        )
    return reply(body)


async def _judge(
    store: preview_store.PreviewStore | None,
    session_id: str,
    listed: list[dict[str, Any]],
    state: dict[str, Any] | None,
    delete: bool,
) -> list[dict[str, Any]]:
    """The live previews of ``listed`` under ``state``. With ``delete`` (only when ``listed``
    was read before ``state``) the superseded ones are deleted: their facts landed or cannot
    land any more; a failed delete is left to the next reader."""
    live, gone = preview_rules.split_live(listed, core.upgrade(state) if state else None)
    if delete and store is not None:
        for preview in gone:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(store.delete, session_id, preview["task"])
    return live


async def follow(
    client: df.DurableOrchestrationClient,
    session_id: str,
    query: inputs.ChangesQuery,
    who: principals.Caller = principals.ANYONE,
    seen: str | None = None,
) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """(latest cursor, records after ``query.after``, live previews), waiting up to
    ``query.wait`` seconds for at least one record - or, with ``seen`` (a preview tag), for
    live previews whose tag differs from it. Re-reads the stored state every
    ``POLL_SECONDS``; holds no lock.

    Whatever the order of the two reads, no answer shows an entry together with the preview it
    superseded: the state that holds the entry is the state that judges the preview. Only the
    clean-up needs an order: a preview is written after its task was committed, so when the
    store is listed *before* the state is read (as for a reader that follows previews), a
    listed preview's task is in that state, and one judged superseded really is."""
    store = preview_store.open_store()
    deadline = time.monotonic() + query.wait
    for _ in range(int(query.wait / POLL_SECONDS) + 2):
        following = seen is not None
        listed = await _list(store, session_id) if following else []
        state = await current_state(client, session_id, who)
        records = core.changes_after(state, query.after, query.limit, session_pages.load_page)
        left = deadline - time.monotonic()
        if not following and (records or left <= 0):
            listed = await _list(store, session_id)  # the answer carries them all the same
        live = await _judge(store, session_id, listed, state, delete=following)
        moved = following and preview_rules.preview_tag(live) != seen
        if records or moved or left <= 0:
            break
        await asyncio.sleep(min(POLL_SECONDS, left))
    return state["cursor"], records, live


async def _list(store: preview_store.PreviewStore | None, session_id: str) -> list[dict[str, Any]]:
    if store is None:
        return []
    try:
        return await asyncio.to_thread(store.list, session_id)
    except Exception as exc:  # noqa: BLE001 - previews are lossy: an answer goes out without them
        logging.getLogger(__name__).warning("previews of %s not read: %s", session_id, exc)
        return []


@bp.route(route="sessions/{sessionId}/changes", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_changes(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        query = inputs.changes_query(req.params)
        seen = preview_rules.parse_tag(req.params.get("previews"))
        latest, records, live = await follow(
            client, session_id, query, principals.caller(req), seen
        )
    except KernelError as exc:
        return failure(exc)
    cursor = records[-1]["cursor"] if records else query.after
    return reply(
        {
            "sessionId": session_id,
            "after": query.after,
            "cursor": cursor,
            "latest": latest,
            "changes": records,
            "previews": live,
            "previewTag": preview_rules.preview_tag(live),
        }
    )


async def unheld_submission(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> dict[str, Any]:
    """A submission the session does not hold (yet): accepted and in flight, or rejected."""
    status = await client.get_status(ids.turn_instance_id(session_id, submission_id))
    if not status or not status.runtime_status:
        raise NotFoundError(
            "submission_not_found", f"no submission {submission_id!r}", "submissionId"
        )
    output = status.output if isinstance(status.output, dict) else {}
    body = {"id": submission_id, "status": "accepted", "position": None, "answer": None}
    if output.get("ok") is False:
        body.update(status="rejected", error=output.get("error"))
    return body


@bp.route(
    route="sessions/{sessionId}/submissions/{submissionId}", methods=["GET"], auth_level=LEVEL
)
@bp.durable_client_input(client_name="client")
async def get_submission(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        submission_id = inputs.submission_id(req.route_params.get("submissionId"))
        who = principals.caller(req)
        state = await read_state(client, session_id)
        if not who.may_see(state):  # answered as for a session that does not exist
            raise NotFoundError(
                "submission_not_found", f"no submission {submission_id!r}", "submissionId"
            )
        if state is not None and submission_id in state.get("submissions", {}):
            return reply(core.submission_view(state, submission_id))
        sealed = session_pages.sealed_submission(state, submission_id)
        if sealed is not None:
            return reply({**sealed["submission"], "position": None})
        return reply(await unheld_submission(client, session_id, submission_id))
    except KernelError as exc:
        return failure(exc)


# --- delete ---------------------------------------------------------------------------


@bp.route(route="sessions/{sessionId}", methods=["DELETE"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def delete_session(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        principals.check(principals.caller(req), await read_state(client, session_id), session_id)
        purged = await purge.delete_session(client, session_id, read_state)
    except KernelError as exc:
        return failure(exc)
    store = preview_store.open_store()
    if store is not None:  # nothing reads a deleted session's previews any more
        await asyncio.to_thread(store.clear, session_id)
    return reply({"sessionId": session_id, "deleted": True, "instancesPurged": purged})
