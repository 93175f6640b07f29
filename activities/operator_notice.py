"""``operator_notice``: mail the operator that a task kind failed for good (``docs/loops.md``).

Input: a failure handler's input (``kernel.turn.failures.handler_input``): ``{"kind", "task_id",
"input", "failure", "attempts"}``. Mails ``AGENT_OPERATOR_EMAIL`` through the mail service
(``activities/mail.py`` settings) and returns ``{"notified": true, "to", "message_id"?}``.

It raises when nobody can be told - no operator address or no mail service configured, or
the service refused the mail - so the handler fails and the task's tier is
``needs_attention``: a person must look at the task record instead. The mail's idempotency
key is derived from the task id, so an activity run twice (at-least-once delivery) mails once.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import azure.durable_functions as df

from activities import mail
from kernel.common import ids

bp = df.Blueprint()


class NobodyToTell(RuntimeError):
    """No operator could be notified; the task needs attention."""


def notice_text(job: dict[str, Any]) -> str:
    given = json.dumps(job.get("input"), ensure_ascii=False, sort_keys=True)[:4000]
    return (
        f"The task {job['task_id']} ({job['kind']}) failed {job['attempts']} time(s) and will"
        f" not be tried again.\n\nLast failure: {job['failure']}\n\nInput: {given}\n"
    )


@bp.activity_trigger(input_name="job")
async def operator_notice(job: dict[str, Any]) -> dict[str, Any]:
    config = mail.MailConfig.from_env()
    operator = os.environ.get("AGENT_OPERATOR_EMAIL", "").strip()
    if config is None or not operator:
        raise NobodyToTell("no operator to notify: AGENT_OPERATOR_EMAIL and AGENT_MAIL_BASE_URL")
    message = {
        "to": operator,
        "subject": f"Task failed: {job['kind']}"[:200],
        "operation_id": f"failure-{uuid.uuid5(ids.NAMESPACE, 'on-failure:' + job['task_id'])}",
    }
    sent = await mail.post(config, message, notice_text(job))
    if not (sent["ok"] or sent["maybe_sent"]):
        raise NobodyToTell(f"the operator was not notified: {sent['code']}: {sent['message']}")
    return {"notified": True, "to": operator, "message_id": (sent.get("receipt") or {}).get("id")}
