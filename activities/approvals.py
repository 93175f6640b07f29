"""``issue_approval``: make a tool task's approval tokens and mail them to the approver.

Called by ``tool_task`` when it starts waiting for an approval, with ``{session_id,
tool_task_id, tool, until}``. It makes one token per decision (``secrets``: activities may use
randomness, orchestrators may not), mails the approver one link per decision and returns only
``{"ok", "hashes": {decision: sha256}, "notified", "message"}`` (``kernel.turn.approval_tokens``):
the tokens themselves never reach a history, a custom status, the session or a log.

Settings:
* ``AGENT_APPROVER_EMAIL`` - who decides; without it no token is made and only an operator with
  the admin key can approve (``docs/security.md``);
* ``AGENT_PUBLIC_URL`` - the app's public origin for the links (e.g.
  ``https://agents.example.com``); on Azure ``WEBSITE_HOSTNAME`` gives it when unset;
* the mail service settings of ``activities/mail.py``.

An activity runs at least once: a second execution makes new tokens and mails new links, and
the history keeps the hashes of whichever execution completed first, so a link of the other
mail is refused. Each mail has its own operation id (from its token's hash), so the mail
service never mistakes the second mail for a repeat of the first.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from typing import Any

import azure.durable_functions as df

from activities import mail
from kernel.turn.approval_tokens import DECISIONS, token_hash

bp = df.Blueprint()


def public_base() -> str | None:
    base = os.environ.get("AGENT_PUBLIC_URL", "").strip().rstrip("/")
    if base:
        return base
    host = os.environ.get("WEBSITE_HOSTNAME", "").strip()
    return f"https://{host}" if host else None


def link(base: str, task_id: str, decision: str, token: str) -> str:
    query = urllib.parse.urlencode({"decision": decision, "token": token})
    return f"{base}/api/approvals/{urllib.parse.quote(task_id, safe=':')}?{query}"


def mail_text(job: dict[str, Any], links: dict[str, str]) -> str:
    return (
        f"The agent asks to run the tool {job['tool']} in session {job['session_id']}"
        f" (task {job['tool_task_id']}).\n\n"
        f"Approve: {links['approve']}\n\nReject: {links['reject']}\n\n"
        f"Each link works once, for this task only, until {job['until']}. Opening a link shows"
        " the decision; nothing happens until you confirm it.\n"
    )


def refused(message: str) -> dict[str, Any]:
    return {"ok": False, "hashes": None, "notified": False, "message": message}


@bp.activity_trigger(input_name="job")
async def issue_approval(job: dict[str, Any]) -> dict[str, Any]:
    config = mail.MailConfig.from_env()
    approver = os.environ.get("AGENT_APPROVER_EMAIL", "").strip()
    base = public_base()
    if config is None or not approver or base is None:
        return refused(
            "no approval link sent: AGENT_APPROVER_EMAIL, AGENT_PUBLIC_URL (or WEBSITE_HOSTNAME)"
            " and AGENT_MAIL_BASE_URL are needed; an operator can decide with the admin key"
        )
    task_id = str(job["tool_task_id"])
    tokens = {decision: secrets.token_urlsafe(32) for decision in DECISIONS}
    hashes = {d: token_hash(task_id, d, token) for d, token in tokens.items()}
    links = {d: link(base, task_id, d, token) for d, token in tokens.items()}
    message = {
        "to": approver,
        "subject": f"Approval needed: {job['tool']}"[:200],
        "operation_id": f"approval-{hashes['approve'][:40]}",
    }
    sent = await mail.post(config, message, mail_text(job, links))
    if not (sent["ok"] or sent["maybe_sent"]):
        return refused(f"the approval mail was not sent: {sent['code']}: {sent['message']}")
    # A mail that may have arrived keeps its links valid: the approver may hold them.
    return {"ok": True, "hashes": hashes, "notified": bool(sent["ok"]), "message": None}
