"""Approvals by link: the route the approver's mail points at, and the one-decision rule.

``GET /api/approvals/{toolTaskId}?decision=approve|reject&token=...`` shows what the link
decides and changes nothing (mail scanners and link previews open links); its form posts the
same URL. ``POST`` (the same query, or a JSON body ``{"decision", "token"}``) decides: 202
``{"accepted": true, "decision", "instanceId"}`` once the tool task's ``approval:{task}`` event
is durable.

The route is anonymous for the host: the token is the credential. It is good only when
* it hashes to the hash the waiting tool task published for that decision
  (``kernel.turn.approval_tokens``): bound to this task and this decision (while the task says its
  links are still ``pending``, the route waits up to ``ISSUING_POLLS`` short polls for them);
* the task is still waiting and its deadline (``until``) has not passed;
* no decision was taken for the task yet: the first decision claims the task's marker in the
  attempt ledger (create-if-absent, so two racing requests cannot both win), by link or by the
  admin route (``api/operator.py``), and a link is refused from then on.

A refused link answers 401 (no token) or 403 ``approval_token_invalid`` / ``_expired`` /
``_used`` with the usual ``{"error", "message", "field"}`` body and changes nothing; refusals
are logged at most once a minute, as a count and a reason, never with a token.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters.attempt_ledger import default_ledger
from api import inputs
from api.replies import reply
from kernel.common import ids
from kernel.common.errors import KernelError
from kernel.turn.approval_tokens import DECISIONS, TOKEN_PATTERN, claim_owner, matches, token_hash

bp = df.Blueprint()
log = logging.getLogger("agent.approvals")
MARKER_LEASE_S = 366 * 24 * 3600.0  # a decision marker is never taken over
LOG_EVERY_S = 60.0
ISSUING_POLLS, ISSUING_POLL_S = 50, 0.2  # at most 10 s for an approval whose links are in flight
_TOKEN = re.compile(TOKEN_PATTERN)


class _Refusals:
    """Counts refused links and logs one line a minute, so a flood cannot flood the log."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.last: float | None = None

    def note(self, reason: str) -> None:
        with self.lock:
            self.count += 1
            now = time.monotonic()
            if self.last is not None and now - self.last < LOG_EVERY_S:
                return
            count, self.count, self.last = self.count, 0, now
        log.warning("approval links refused: %d since the last report (latest: %s)", count, reason)


refusals = _Refusals()


def marker_key(task_id: str) -> str:
    return f"approval:{task_id}"


async def claim(task_id: str, owner: str) -> str:
    """Claim the task's one decision for ``owner``: ``claimed``, ``mine`` (this owner claimed it
    before: a retry) or ``taken``."""
    ledger = default_ledger()
    key = marker_key(task_id)
    if await asyncio.to_thread(ledger.create, key, owner, MARKER_LEASE_S):
        return "claimed"
    record = await asyncio.to_thread(ledger.read, key)
    return "mine" if record is not None and record.owner == owner else "taken"


async def waiting_status(
    client: df.DurableOrchestrationClient, task_id: str
) -> dict[str, Any] | None:
    """The custom status of a tool task that is waiting for an approval, else None."""
    status = await client.get_status(task_id)
    if not status or not status.runtime_status or status.runtime_status.value != "Running":
        return None
    custom = inputs.status_object(status.custom_status)
    if custom.get("phase") != "approval" or not custom.get("event"):
        return None
    return custom


def refuse(status: int, code: str, message: str, field: str | None = "token") -> func.HttpResponse:
    refusals.note(code)
    return reply({"error": code, "message": message, "field": field}, status)


def presented(req: func.HttpRequest) -> tuple[str | None, str | None]:
    """(decision, token) from the query, or from a JSON body of a POST."""
    decision, token = req.params.get("decision"), req.params.get("token")
    if req.method == "POST" and (decision is None or token is None):
        try:
            body = json.loads(req.get_body() or b"{}")
        except ValueError:
            body = {}
        if isinstance(body, dict):
            decision = decision if decision is not None else body.get("decision")
            token = token if token is not None else body.get("token")
    return (
        decision if isinstance(decision, str) else None,
        token if isinstance(token, str) else None,
    )


def confirm_page(task_id: str, decision: str, tool: str) -> func.HttpResponse:
    verb = "Approve" if decision == "approve" else "Reject"
    text = html.escape(f"{verb} running {tool} for task {task_id}?")
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Approval</title></head><body>"
        f"<p>{text}</p><form method='post'><button type='submit'>{verb}</button></form>"
        "</body></html>"
    )
    return func.HttpResponse(page, status_code=200, mimetype="text/html", charset="utf-8",
                             headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})  # fmt: skip


async def check_link(
    client: df.DurableOrchestrationClient, task_id: str, decision: str, token: str
) -> tuple[dict[str, Any] | None, func.HttpResponse | None]:
    """(the waiting status, None) for a good link, else (None, the refusal)."""
    digest = token_hash(task_id, decision, token)
    record = await asyncio.to_thread(default_ledger().read, marker_key(task_id))
    if record is not None and record.owner == claim_owner(digest):
        return None, refuse(403, "approval_token_used", "this approval link was used already")
    custom = await waiting_status(client, task_id)
    for _ in range(ISSUING_POLLS):  # the mail can arrive before the hashes are published
        if custom is None or custom.get("links") != "pending":
            break
        await asyncio.sleep(ISSUING_POLL_S)
        custom = await waiting_status(client, task_id)
    if custom is None or not matches(custom.get("token_hashes"), task_id, decision, token):
        message = "the approval link is not valid (wrong, expired or the task was decided)"
        return None, refuse(403, "approval_token_invalid", message)
    until = str(custom.get("until") or "")
    if until and datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") >= until:
        return None, refuse(403, "approval_token_expired", "this approval link has expired")
    return custom, None


@bp.route(
    route="approvals/{toolTaskId}", methods=["GET", "POST"], auth_level=func.AuthLevel.ANONYMOUS
)
@bp.durable_client_input(client_name="client")
async def approval_link(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    decision, token = presented(req)
    if not token:
        return refuse(401, "approval_token_required", "an approval link's token is required")
    if not _TOKEN.match(token):
        return refuse(403, "approval_token_invalid", "the approval link is not valid")
    if decision not in DECISIONS:
        return refuse(400, "invalid_decision", "decision must be approve or reject", "decision")
    try:
        task_id = ids.validate_instance_id(req.route_params.get("toolTaskId"), "toolTaskId")
    except KernelError:  # a malformed id is just a link that matches nothing
        return refuse(403, "approval_token_invalid", "the approval link is not valid")
    custom, refused = await check_link(client, task_id, decision, token)
    if refused is not None or custom is None:
        return refused or refuse(403, "approval_token_invalid", "the approval link is not valid")
    if req.method == "GET":
        return confirm_page(task_id, decision, str(custom.get("tool") or "the tool"))
    digest = token_hash(task_id, decision, token)
    if await claim(task_id, claim_owner(digest)) == "taken":
        return refuse(403, "approval_token_used", "a decision was taken for this task already")
    payload = {"requestId": f"link-{digest[:16]}", "decision": decision, "via": "link"}
    await client.raise_event(task_id, custom["event"], payload)
    return reply({"accepted": True, "decision": decision, "instanceId": task_id}, 202)
