"""``send_notices`` and ``send_notice``: one approved notice to many recipients, each send verified.

``send_notices`` (the parent; input ``{session_id, submission_id, tool_task_id, recipients,
subject, body | body_ref, policy, settings?}``, see ``kernel.session.task_types``):

1. Validates the input, then asks ``notices_prepare`` whether the session, submission, parent
   task and body exist and which settings apply. Any problem ends the run with
   ``{"ok": false, "kind": "invalid", "error", "results": [], "summary"}`` before anything is
   planned or sent.
2. Commits, in one session commit, the body (a ``note`` document, unless the input named one
   by ``body_ref``), the ``notice_plan`` document (recipients, subject, body reference, policy,
   one ``planned`` receipt with its operation id per recipient), its own task record in phase
   ``waiting`` and one ``pending`` task record per child.
3. Starts one ``send_notice`` child per recipient (explicit ids ``{parent}:mail-{n}``, at most
   ``max_parallel`` at a time) and joins them with a progressive ``task_any`` loop that also
   listens for its own ``cancel:{parent}`` event.
4. ``failFast``: the first child that is not confirmed stops the run. A cancel event stops it
   too. Stopping records the intent first (task ``completing``, phase ``cancelling``), then
   raises each running child's ``cancel:{child}`` event, waits up to ``cancel_grace_s`` on a
   durable timer, terminates stragglers and waits once more. Children never started are
   ``cancelled``; a child that ended without a result is ``uncertain`` unless it committed one.
5. Merges every outcome into the plan (receipts and summary) and closes the task records, then
   returns ``{"ok", "kind": "settled" | "cancelled" | "stopped", "results": [{recipient,
   outcome, detail}], "summary", "plan_id"}``. ``ok`` is true when every notice is confirmed.

``send_notice`` (one child): commits its intent (task ``running``, phase ``sending``); before
every send checks its ``cancel:{child}`` event (raced with a zero timer); sends with the
operation id as idempotency key; when the answer leaves the outcome open, confirms by query
after a durable sleep, a bounded number of times; commits its receipt to the plan with
``expected_version`` (re-read and retry on ``version_conflict``, bounded) together with its
terminal task status; and returns ``{"ok", "kind", "recipient", "outcome", "detail",
"receipt"}``. It never raises for an expected failure, and it never guesses: a send the service
can neither confirm nor deny ends ``uncertain`` (task ``interrupted``) with the facts.

Both are deterministic: settings come from the input and from ``notices_prepare``, times from
``context.current_utc_datetime``, ids from ``kernel.common.ids`` and ``kernel.session.task_types``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from activities.cancel import cancel_event
from kernel.common import ids
from kernel.common.errors import KernelError
from kernel.common.statuses import TERMINAL_TASK_STATUSES, TaskStatus
from kernel.session import task_types
from kernel.session.documents import MAX_RECIPIENTS
from kernel.session.task_types import CHILD_STATUS, OUTCOMES, NoticeSettings, SendNoticeInput
from orchestrators.steps import child_version, event_payload, session_entity, set_phase

bp = df.Blueprint()
PARENT = task_types.task_type("send_notices")
CHILD = task_types.task_type("send_notice")
# Every version conflict means another writer of the plan succeeded, and each child writes
# the plan once, so this bounds a commit loop even when every child finishes at once.
COMMIT_ATTEMPTS = MAX_RECIPIENTS + 4
MAX_DETAIL = 300

Gen = Generator[Any, Any, Any]


def event_reason(payload: Any) -> str:
    """The ``reason`` of a cancel event, whichever way its payload was encoded."""
    reason = event_payload(payload).get("reason")
    return clip(reason) if isinstance(reason, str) and reason else "no reason given"


def sleep_or_cancel(context: df.DurableOrchestrationContext, cancel: Any, seconds: float) -> Gen:
    """Sleep on a durable timer unless ``cancel`` completes first; True if it did.

    ``cancel`` is one long-lived event task, raced again at every check: a fresh wait on the
    same name would leave the abandoned one to swallow the event.
    """
    if cancel.is_completed:
        return True
    timer = context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    winner = yield context.task_any([cancel, timer])
    if winner == timer:
        return False
    if not timer.is_completed:
        timer.cancel()
    return True


# --- send_notices ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Child:
    index: int
    recipient: str
    instance_id: str
    operation_id: str


@dataclass(frozen=True, slots=True)
class Stop:
    kind: str  # "cancelled" (a cancel request) or "failFast"
    reason: str


@dataclass
class Run:
    """The parent's working state; replay rebuilds it identically from history."""

    parent_id: str
    job: task_types.SendNoticesInput
    body_ref: str
    settings: NoticeSettings
    plan_id: str
    children: list[Child]
    running: dict[Any, Child] = field(default_factory=dict)
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)
    started: int = 0
    app_version: str = ""  # the parent's context.version: children inherit it

    @classmethod
    def plan(
        cls, parent_id: str, job: task_types.SendNoticesInput, settings: NoticeSettings
    ) -> Run:
        plan_id = task_types.plan_document_id(parent_id)
        body_ref = job.body_ref or task_types.body_document_id(plan_id)
        children = [
            Child(
                i,
                r,
                ids.child_task_id(parent_id, task_types.child_key(i)),
                task_types.notice_operation_id(parent_id, r, body_ref),
            )
            for i, r in enumerate(job.recipients)
        ]
        return cls(parent_id, job, body_ref, settings, plan_id, children)

    def plan_commit(self) -> dict[str, Any]:
        receipts = {
            c.recipient: {"status": "planned", "operation_id": c.operation_id}
            for c in self.children
        }
        data = {
            "recipients": list(self.job.recipients),
            "subject": self.job.subject,
            "body_ref": self.body_ref,
            "policy": self.job.policy,
            "receipts": receipts,
        }
        parent = {
            "id": self.parent_id,
            "kind": PARENT.kind,
            "version": PARENT.version_for(self.app_version),
            "status": TaskStatus.WAITING,
            "phase": "waiting",
            "parent": self.job.tool_task_id,
        }
        tasks = [
            {
                "id": c.instance_id,
                "kind": CHILD.kind,
                "version": CHILD.version_for(self.app_version),
                "status": TaskStatus.PENDING,
                "phase": "planned",
                "parent": self.parent_id,
            }
            for c in self.children
        ]
        documents = [
            {"id": self.plan_id, "type": "notice_plan", "data": data, "expected_version": 0}
        ]
        if self.job.body is not None:  # stored once, next to the plan that refers to it
            documents.insert(
                0,
                {
                    "id": self.body_ref,
                    "type": "note",
                    "expected_version": 0,
                    "data": {"title": self.job.subject, "text": self.job.body},
                },
            )
        return {"documents": documents, "tasks": [parent, *tasks]}

    def child_input(self, child: Child) -> dict[str, Any]:
        return SendNoticeInput(
            session_id=self.job.session_id,
            parent_id=self.parent_id,
            plan_id=self.plan_id,
            recipient=child.recipient,
            subject=self.job.subject,
            body_ref=self.body_ref,
            operation_id=child.operation_id,
            settings=self.settings,
        ).model_dump(mode="json")

    def start_more(self, context: df.DurableOrchestrationContext) -> None:
        while self.started < len(self.children) and len(self.running) < self.settings.max_parallel:
            child = self.children[self.started]
            task = context.call_sub_orchestrator(
                CHILD.kind,
                self.child_input(child),
                child.instance_id,
                version=child_version(context),
            )
            self.running[task] = child
            self.started += 1

    def settle(self, task: Any) -> dict[str, Any]:
        child = self.running.pop(task)
        value = task.result
        if isinstance(value, dict) and value.get("outcome") in OUTCOMES:
            outcome = {
                "outcome": value["outcome"],
                "detail": value.get("detail"),
                "receipt": value.get("receipt"),
                "reported": True,
            }
        else:
            outcome = {
                "outcome": "uncertain",
                "reported": False,
                "detail": clip(
                    f"the child ended without a result ({value}); operation "
                    f"{child.operation_id} may have been accepted"
                ),
            }
        self.outcomes[child.index] = {"recipient": child.recipient, **outcome}
        return self.outcomes[child.index]

    def close_unfinished(self, stop: Stop) -> None:
        for child in self.running.values():
            self.outcomes[child.index] = {
                "recipient": child.recipient,
                "outcome": "uncertain",
                "reported": False,
                "detail": f"did not end after termination; operation {child.operation_id} "
                "may have been accepted",
            }
        self.running.clear()
        for child in self.children[self.started :]:
            self.outcomes[child.index] = {
                "recipient": child.recipient,
                "outcome": "cancelled",
                "reported": False,
                "detail": clip(f"not sent: {stop.reason}"),
            }
        self.started = len(self.children)

    def adopt_recorded(self, receipts: dict[str, Any]) -> None:
        """A receipt a child committed is a fact; it replaces a guess made without it."""
        for index, outcome in self.outcomes.items():
            recorded = receipts.get(outcome["recipient"]) or {}
            if not outcome["reported"] and recorded.get("status") in OUTCOMES:
                self.outcomes[index] = {
                    **outcome,
                    "outcome": recorded["status"],
                    "detail": recorded.get("detail"),
                    "receipt": recorded,
                }

    def conclusion(self, stop: Stop | None) -> tuple[list[dict[str, Any]], str, str]:
        """(results, summary, terminal task status) from the outcomes known now."""
        results = self.results()
        summary = task_types.summarize(results, stop.reason if stop else None)
        cancelled = stop is not None and stop.kind == "cancelled"
        return results, summary, task_types.final_status(results, cancelled)

    def results(self) -> list[dict[str, Any]]:
        return [
            {
                "recipient": c.recipient,
                "outcome": self.outcomes[c.index]["outcome"],
                "detail": self.outcomes[c.index].get("detail"),
            }
            for c in self.children
        ]

    def final_commit(
        self, plan: dict[str, Any], statuses: dict[str, Any], status: str, summary: str
    ) -> dict[str, Any]:
        receipts = dict(plan["data"].get("receipts") or {})
        for child in self.children:
            outcome = self.outcomes[child.index]
            if (receipts.get(child.recipient) or {}).get("status") not in OUTCOMES:
                receipts[child.recipient] = outcome.get("receipt") or {
                    "status": outcome["outcome"],
                    "operation_id": child.operation_id,
                    "detail": outcome.get("detail"),
                }
        data = {**plan["data"], "receipts": receipts, "summary": clip(summary, 1000)}
        tasks = [
            {"id": self.parent_id, "status": status, "phase": "done", "reason": clip(summary, 1000)}
        ]
        for child in self.children:
            if statuses.get(child.instance_id) not in (None, *TERMINAL_TASK_STATUSES):
                outcome = self.outcomes[child.index]
                tasks.append(
                    {
                        "id": child.instance_id,
                        "status": CHILD_STATUS[outcome["outcome"]],
                        "phase": "done",
                        "reason": clip(outcome.get("detail") or "", 1000),
                    }
                )
        return {
            "documents": [
                {
                    "id": self.plan_id,
                    "type": "notice_plan",
                    "data": data,
                    "expected_version": plan["version"],
                }
            ],
            "tasks": tasks,
        }


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@bp.orchestration_trigger(context_name="context")
def send_notices(context: df.DurableOrchestrationContext) -> Gen:
    set_phase(context, "validating")
    try:
        job = task_types.parse_input(PARENT.kind, context.get_input())
    except KernelError as exc:
        return refuse(context, exc)
    prepared = yield context.call_activity(
        "notices_prepare",
        {
            "session_id": job.session_id,
            "submission_id": job.submission_id,
            "tool_task_id": job.tool_task_id,
            "body_ref": job.body_ref,
        },
    )
    if not prepared["ok"]:
        return refuse(context, prepared["error"])
    try:
        settings = task_types.settings_from(prepared["settings"], job.settings)
    except KernelError as exc:
        return refuse(context, exc)
    run = Run.plan(context.instance_id, job, settings)
    run.app_version = context.version or ""
    planned = yield context.call_entity(session_entity(job.session_id), "commit", run.plan_commit())
    if not planned["ok"]:
        return refuse(context, planned["error"])
    set_phase(context, "waiting", total=len(run.children))
    stop = yield from join_children(context, run)
    if stop is not None:
        yield from wind_down(context, run, stop)
    return (yield from finish(context, run, stop))


def join_children(context: df.DurableOrchestrationContext, run: Run) -> Gen:
    """Start and settle children until all are settled; a Stop when the run must end early."""
    cancel = context.wait_for_external_event(cancel_event(run.parent_id))
    for _ in range(len(run.children) + 1):  # every round settles one child
        run.start_more(context)
        if not run.running:
            return None
        winner = yield context.task_any([*run.running, cancel])
        if winner == cancel:
            return Stop("cancelled", f"cancel requested: {event_reason(cancel.result)}")
        outcome = run.settle(winner)
        set_phase(context, "waiting", total=len(run.children), settled=len(run.outcomes))
        if run.job.policy == "failFast" and outcome["outcome"] != "confirmed":
            return Stop("failFast", f"failFast: {outcome['recipient']} {outcome['outcome']}")
    return None


def wind_down(context: df.DurableOrchestrationContext, run: Run, stop: Stop) -> Gen:
    """Record the intent, ask running children to stop, terminate stragglers after a grace."""
    set_phase(context, "completing", reason=clip(stop.reason, 200))
    yield context.call_entity(
        session_entity(run.job.session_id),
        "commit",
        {
            "tasks": [
                {
                    "id": run.parent_id,
                    "status": TaskStatus.COMPLETING,
                    "phase": "cancelling",
                    "reason": clip(stop.reason, 1000),
                }
            ]
        },
    )
    for action in ("raise_cancel", "terminate_stragglers"):
        if not run.running:
            break
        live = [child.instance_id for child in run.running.values()]
        yield context.call_activity(action, {"instance_ids": live, "reason": stop.reason})
        yield from drain(context, run, run.settings.cancel_grace_s)
    run.close_unfinished(stop)


def drain(context: df.DurableOrchestrationContext, run: Run, seconds: float) -> Gen:
    """Settle running children until none is left or ``seconds`` have passed."""
    timer = context.create_timer(context.current_utc_datetime + timedelta(seconds=seconds))
    for _ in range(len(run.running)):
        winner = yield context.task_any([*run.running, timer])
        if winner == timer:
            return
        run.settle(winner)
    if not timer.is_completed:
        timer.cancel()


def finish(context: df.DurableOrchestrationContext, run: Run, stop: Stop | None) -> Gen:
    """Merge the outcomes into the plan and close the task records; return the result."""
    set_phase(context, "recording")
    recorded = yield from record_outcomes(context, run, stop)
    results, summary, status = run.conclusion(stop)
    set_phase(context, "done", status=status, summary=clip(summary, 200))
    kind = "settled" if stop is None else ("cancelled" if stop.kind == "cancelled" else "stopped")
    return {
        "ok": all(r["outcome"] == "confirmed" for r in results),
        "kind": kind,
        "results": results,
        "summary": summary,
        "plan_id": run.plan_id,
        "recorded": recorded,
    }


def record_outcomes(context: df.DurableOrchestrationContext, run: Run, stop: Stop | None) -> Gen:
    """The final plan commit, against the version just read; True once it is applied."""
    child_ids = [child.instance_id for child in run.children]
    for _ in range(COMMIT_ATTEMPTS):
        read = yield context.call_activity(
            "notices_read",
            {"session_id": run.job.session_id, "plan_id": run.plan_id, "task_ids": child_ids},
        )
        if read.get("plan") is None:
            return False
        run.adopt_recorded(read["plan"]["data"].get("receipts") or {})
        _, summary, status = run.conclusion(stop)
        commit = run.final_commit(read["plan"], read["tasks"], status, summary)
        done = yield context.call_entity(session_entity(run.job.session_id), "commit", commit)
        if done["ok"]:
            return True
        if done["error"]["error"] != "version_conflict":
            return False
    return False


def refuse(context: df.DurableOrchestrationContext, error: Any) -> dict[str, Any]:
    result = task_types.error_result(error)
    set_phase(context, "done", status="invalid", error=result["error"]["error"])
    return result


# --- send_notice ----------------------------------------------------------------------------


@dataclass
class Facts:
    """What one child learnt about its send; the detail of an uncertain outcome."""

    attempts: int = 0
    queries: int = 0
    maybe_sent: bool = False
    last: str | None = None

    def note(self, answer: dict[str, Any]) -> None:
        self.maybe_sent = self.maybe_sent or bool(answer.get("maybe_sent"))
        if answer.get("kind") in ("transient", "unknown"):
            self.last = clip(f"{answer.get('code')}: {answer.get('message')}", 200)

    def unresolved(self, operation_id: str) -> str:
        return clip(
            f"no verdict from the mail service after {self.attempts} send attempt(s) and "
            f"{self.queries} quer{'y' if self.queries == 1 else 'ies'} (last: {self.last}); "
            f"operation {operation_id} may or may not have been accepted"
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str
    detail: str
    service: dict[str, Any] | None = None  # the service's receipt, when it has the message


def confirmed(receipt: dict[str, Any]) -> Verdict:
    how: dict[Any, str] = {
        "send": "accepted",
        "lookup": "found by look-up",
        "confirm": "confirmed by query",
    }
    source = how.get(receipt.get("source"), "")
    return Verdict("confirmed", f"message {receipt.get('message_id')} {source}".strip(), receipt)


def refused(answer: dict[str, Any]) -> Verdict:
    outcome = "rejected" if answer.get("code") == "recipient_rejected" else "failed"
    return Verdict(outcome, clip(f"{answer.get('code')}: {answer.get('message')}"))


@bp.orchestration_trigger(context_name="context")
def send_notice(context: df.DurableOrchestrationContext) -> Gen:
    raw = context.get_input()
    try:
        job = task_types.parse_input(CHILD.kind, raw)
    except KernelError as exc:  # built by the parent, so this is a bug: report it, send nothing
        recipient = raw.get("recipient") if isinstance(raw, dict) else None
        return {
            "ok": False,
            "kind": "failed",
            "recipient": recipient,
            "outcome": "failed",
            "detail": f"invalid child input: {exc}",
            "receipt": None,
        }
    set_phase(context, "intent")
    intent = yield context.call_entity(
        session_entity(job.session_id),
        "commit",
        {"tasks": [{"id": context.instance_id, "status": TaskStatus.RUNNING, "phase": "sending"}]},
    )
    if intent["ok"]:
        cancel = context.wait_for_external_event(cancel_event(context.instance_id))
        verdict = yield from deliver(context, job, cancel, Facts())
    else:  # never send what could not be recorded as intended
        verdict = Verdict("failed", clip(f"intent not recorded: {intent['error']['message']}"))
    receipt = receipt_for(job, verdict)
    set_phase(context, "recording", outcome=verdict.outcome)
    recorded = yield from record(context, job, verdict, receipt)
    set_phase(context, "done", outcome=verdict.outcome)
    return {
        "ok": verdict.outcome == "confirmed",
        "kind": verdict.outcome,
        "recipient": job.recipient,
        "outcome": verdict.outcome,
        "detail": verdict.detail,
        "receipt": receipt,
        "recorded": recorded,
    }


def deliver(
    context: df.DurableOrchestrationContext, job: SendNoticeInput, cancel: Any, facts: Facts
) -> Gen:
    """Send until the service answers for certain, verifying every answer left open."""
    settings = job.settings
    send = {
        "session_id": job.session_id,
        "operation_id": job.operation_id,
        "to": job.recipient,
        "subject": job.subject,
        "body_ref": job.body_ref,
    }
    for _ in range(settings.send_attempts):
        if (yield from sleep_or_cancel(context, cancel, 0)):
            return (yield from after_cancel(context, job, facts))
        facts.attempts += 1
        set_phase(context, "sending", attempt=facts.attempts)
        answer = yield context.call_activity("send_mail", send)
        facts.note(answer)
        if answer["kind"] == "accepted":
            return confirmed(answer["receipt"])
        if answer["kind"] == "rejected":
            return refused(answer)
        if answer["kind"] == "transient" and facts.attempts < settings.send_attempts:
            set_phase(context, "backoff", attempt=facts.attempts)
            if (yield from sleep_or_cancel(context, cancel, backoff(settings, answer, facts))):
                return (yield from after_cancel(context, job, facts))
            continue
        if not facts.maybe_sent:
            break  # no send ever reached the service: nothing to verify
        verdict = yield from confirm(context, job, cancel, facts)
        if verdict is not None:
            return verdict
        # The service says it never got it: sending again is safe (same key).
    return Verdict(
        "failed", clip(f"not accepted after {facts.attempts} attempt(s) (last: {facts.last})")
    )


def backoff(settings: NoticeSettings, answer: dict[str, Any], facts: Facts) -> float:
    hinted = answer.get("retry_after")
    wanted = (
        hinted
        if isinstance(hinted, int | float)
        else (settings.retry_backoff_s * 2 ** (facts.attempts - 1))
    )
    return min(float(wanted), settings.max_retry_after_s)


def confirm(
    context: df.DurableOrchestrationContext, job: SendNoticeInput, cancel: Any, facts: Facts
) -> Gen:
    """Ask the service about the operation id after a durable sleep, a bounded number of times.

    Returns a Verdict, or None when the service says it never accepted the operation (the
    caller may send again). A cancel request cuts the sleeps short but not the verification.
    """
    settings = job.settings
    for _ in range(settings.confirm_attempts):
        set_phase(context, "confirming", query=facts.queries + 1)
        stopping = yield from sleep_or_cancel(context, cancel, settings.confirm_interval_s)
        answer = yield context.call_activity("query_mail", {"operation_id": job.operation_id})
        facts.queries += 1
        if answer["kind"] == "accepted":
            return confirmed(answer["receipt"])
        if answer.get("code") == "not_found":
            return (
                Verdict("cancelled", "cancelled; the service confirms it never got it")
                if stopping
                else None
            )
        facts.note(answer)
        if stopping:
            break
    return Verdict("uncertain", facts.unresolved(job.operation_id))


def after_cancel(
    context: df.DurableOrchestrationContext, job: SendNoticeInput, facts: Facts
) -> Gen:
    """Stop sending; a send that may have reached the service is verified once more."""
    if not facts.maybe_sent:
        return Verdict(
            "cancelled",
            "cancelled before sending"
            if not facts.attempts
            else "cancelled; no send reached the service",
        )
    answer = yield context.call_activity("query_mail", {"operation_id": job.operation_id})
    facts.queries += 1
    if answer["kind"] == "accepted":
        return confirmed(answer["receipt"])
    if answer.get("code") == "not_found":
        return Verdict("cancelled", "cancelled; the service confirms it never got it")
    facts.note(answer)
    return Verdict("uncertain", facts.unresolved(job.operation_id))


def receipt_for(job: SendNoticeInput, verdict: Verdict) -> dict[str, Any]:
    receipt: dict[str, Any] = {
        "status": verdict.outcome,
        "operation_id": job.operation_id,
        "detail": verdict.detail,
    }
    if verdict.service:
        receipt.update({k: verdict.service.get(k) for k in ("message_id", "accepted_at", "source")})
    return receipt


def record(
    context: df.DurableOrchestrationContext,
    job: SendNoticeInput,
    verdict: Verdict,
    receipt: dict[str, Any],
) -> Gen:
    """Commit the receipt into the plan and the terminal task status, in one commit."""
    entity = session_entity(job.session_id)
    task = {
        "id": context.instance_id,
        "status": CHILD_STATUS[verdict.outcome],
        "phase": "done",
        "reason": clip(verdict.detail, 1000),
    }
    for _ in range(COMMIT_ATTEMPTS):
        read = yield context.call_activity(
            "notices_read", {"session_id": job.session_id, "plan_id": job.plan_id, "task_ids": []}
        )
        plan = read.get("plan")
        if plan is None:
            break
        receipts = {**(plan["data"].get("receipts") or {}), job.recipient: receipt}
        done = yield context.call_entity(
            entity,
            "commit",
            {
                "documents": [
                    {
                        "id": job.plan_id,
                        "type": "notice_plan",
                        "data": {**plan["data"], "receipts": receipts},
                        "expected_version": plan["version"],
                    }
                ],
                "tasks": [task],
            },
        )
        if done["ok"]:
            return True
        if done["error"]["error"] != "version_conflict":
            break
    # The task graph still learns the outcome; the parent merges the receipt when it finishes.
    yield context.call_entity(entity, "commit", {"tasks": [task]})
    return False
