"""``agent_round``: one round of a turn, its own orchestration (``{run}:round-{n}[.{k}]``).

Called by ``agent_run`` with ``{session_id, submission_id, turn_id, run_id, nonce, limits,
round, attempt, tokens_used}``. Returns ``{"kind": continue|answer|stop|attention,
"tokens_used", ...}``: ``answer`` carries the answer, ``stop`` a final ``status`` and a
``reason``, ``attention`` a ``reason`` and the ``facts`` (phase, attempts) of a round that
cannot go on.

Phases (custom status ``{"phase", "round", ...}``; task record ``round`` under the turn):

1. prepare: stop if the submission is finished or a cancel was requested; record the round task.
2. request: take a model-call slot from the ``semaphore`` entity, call ``call_model`` with a
   reference (session id + submission id, never the transcript), release the slot. Failures
   come back as envelopes; ``kernel.turn.policy.next_retry_delay`` decides the durable timer
   before the next attempt (backoff, the provider's Retry-After, no retry for fatal errors).
   With ``limits.model_background`` (``AGENT_MODEL_BACKGROUND=1``) the call is a background
   request instead (``orchestrators/model_wait.py``): submitted under the slot, then polled on
   durable timers without it; a cancel while it waits stops the round as ``cancelled``.
3. commit: one commit holds the model response (the assistant entry, with token usage) and the
   tool tasks it asks for, before any tool runs; ``check_guards`` may stop the turn instead.
4. tools: one ``tool_task`` sub-orchestration per call (id ``kernel.common.ids.tool_task_id``); they
   return envelopes and are joined with a progressive ``task_any`` loop; one commit closes the
   round (and gives every failed tool task a result the model can read).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel.common import ids
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES, SubmissionStatus, TaskStatus
from kernel.session import task_types
from kernel.turn import mcp_catalogue
from kernel.turn.model_io import ModelResponse
from kernel.turn.policy import TurnLimits, check_guards, next_retry_delay
from orchestrators import model_wait
from orchestrators.steps import (
    child_version,
    error_text,
    event_or_deadline,
    kind_version,
    session_entity,
    set_status,
    turn_patch,
)

bp = df.Blueprint()
MODEL_SLOTS = df.EntityId("semaphore", "model")
SLOT_POLL = timedelta(seconds=5)  # waiters re-check in case a wake-up was lost
MAX_SLOT_WAITS = 720

Gen = Generator[Any, Any, Any]


@dataclass(slots=True)
class Round:
    """One round's input, read once, and the turn's tokens as the round adds to them."""

    round_id: str
    job: dict[str, Any]
    limits: TurnLimits
    entity: df.EntityId
    tokens: int
    # The round's one wait on its cancel event (background calls only): a second wait on the
    # same name would leave the first, abandoned, to swallow the event.
    cancel: Any = None

    @classmethod
    def of(cls, round_id: str, job: dict[str, Any]) -> Round:
        limits = TurnLimits.from_dict(job["limits"])
        entity = session_entity(job["session_id"])
        return cls(round_id, job, limits, entity, int(job["tokens_used"]))

    @property
    def number(self) -> int:
        return int(self.job["round"])

    @property
    def submission_id(self) -> str:
        return str(self.job["submission_id"])

    def attention(self, reason: str, **facts: Any) -> dict[str, Any]:
        return {
            "kind": "attention",
            "reason": reason[:1000],
            "facts": facts,
            "tokens_used": self.tokens,
        }

    def stop(self, status: str, reason: str) -> dict[str, Any]:
        return {"kind": "stop", "status": status, "tokens_used": self.tokens, "reason": reason}


@bp.orchestration_trigger(context_name="context")
def agent_round(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    rnd = Round.of(context.instance_id, context.get_input())
    ended = yield from prepare(context, rnd)
    if ended is not None:
        return ended
    reply, gave_up_at = yield from request(context, rnd)
    if reply.get("cancelled"):  # only a background call (model_wait) answers this
        return rnd.stop(SubmissionStatus.CANCELLED, reply["message"])
    if not reply["ok"]:
        facts = {"attempts": gave_up_at} if gave_up_at else {}
        return rnd.attention(
            f"model_{reply['kind']}: {reply.get('message')}", phase="request", **facts
        )
    response = ModelResponse.from_dict(reply["response"])
    ended = yield from commit_response(context, rnd, reply, response)
    if ended is not None:
        return ended
    if not response.tool_calls:
        return {"kind": "answer", "answer": response.content, "tokens_used": rnd.tokens}
    return (yield from run_tools(context, rnd, [c.to_dict() for c in response.tool_calls]))


# --- prepare ----------------------------------------------------------------------------------


def prepare(context: df.DurableOrchestrationContext, rnd: Round) -> Gen:
    """Stop when the submission is over; else record the round task. None to go on."""
    set_status(context, "prepare", round=rnd.number)
    view = yield context.call_entity(
        rnd.entity, "submission_view", {"submission_id": rnd.submission_id}
    )
    if not view["ok"]:
        return rnd.attention(f"session_unavailable: {error_text(view)}", phase="prepare")
    submission = view["result"]
    if submission["status"] in FINAL_SUBMISSION_STATUSES or submission.get("cancel_requested_at"):
        reason = submission.get("cancel_reason") or "cancel requested"
        return rnd.stop(SubmissionStatus.CANCELLED, f"cancelled: {reason}")
    opened = yield context.call_entity(
        rnd.entity,
        "commit",
        {
            "submission_id": rnd.submission_id,
            "tasks": [
                {
                    "id": rnd.round_id,
                    "kind": "round",
                    "version": kind_version(context, "round"),
                    "parent": rnd.job["turn_id"],
                    "status": TaskStatus.RUNNING,
                    "phase": "request",
                },
                turn_patch(
                    rnd.job["turn_id"],
                    status=TaskStatus.RUNNING,
                    phase=f"request (round {rnd.number})",
                ),
            ],
        },
    )
    if not opened["ok"]:
        return rnd.attention(f"commit_failed: {error_text(opened)}", phase="prepare")
    return None


# --- request, with durable retries ------------------------------------------------------------


def request(context: df.DurableOrchestrationContext, rnd: Round) -> Gen:
    """(the last reply, the attempt after which no retry was left or None)."""
    limits = rnd.limits
    reply: dict[str, Any] = {"ok": False, "kind": "transient", "message": "not asked yet"}
    for model_attempt in range(1, limits.max_model_attempts + 1):
        holder = f"{rnd.round_id}:{model_attempt}"
        yield from take_slot(context, rnd, holder)
        set_status(context, "request", round=rnd.number, attempt=model_attempt)
        if limits.model_background:
            reply = yield from background_call(context, rnd, model_attempt, holder)
        else:
            reply = yield from call_model(context, rnd, model_attempt)
            yield from release_slot(context, holder)
        if reply["ok"] or reply.get("cancelled"):
            break
        delay = next_retry_delay(model_attempt, reply, limits)
        if delay is None:
            return reply, model_attempt
        set_status(
            context,
            "retry",
            round=rnd.number,
            attempt=model_attempt,
            kind=reply["kind"],
            delay_s=delay,
        )
        yield context.create_timer(context.current_utc_datetime + timedelta(seconds=delay))
    return reply, None


def take_slot(context: df.DurableOrchestrationContext, rnd: Round, holder: str) -> Gen:
    """Acquire a model-call slot, sleeping on ``slot:{holder}:{n}`` while others hold them."""
    for wait_no in range(1, MAX_SLOT_WAITS + 1):
        event = f"slot:{holder}:{wait_no}"
        slot = yield context.call_entity(
            MODEL_SLOTS,
            "acquire",
            {
                "holder": holder,
                "instance_id": rnd.round_id,
                "event": event,
                "limit": rnd.limits.max_concurrent_model_calls,
                "lease_s": rnd.limits.model_timeout_s + 60,
                "now": context.current_utc_datetime.isoformat(),
            },
        )
        if slot["granted"]:
            return
        set_status(context, "waiting", round=rnd.number, slot_position=slot["position"])
        woken, _ = yield from event_or_deadline(
            context, event, context.current_utc_datetime + SLOT_POLL
        )
        if woken:
            return  # the releaser handed its slot to this holder


def call_model(context: df.DurableOrchestrationContext, rnd: Round, model_attempt: int) -> Gen:
    """The ``call_model`` activity; its envelope (an activity crash is a transient failure)."""
    try:
        return (yield context.call_activity("call_model", model_job(rnd, model_attempt)))
    except Exception as exc:  # noqa: BLE001 - an activity crash is a transient failure
        return {"ok": False, "kind": "transient", "message": str(exc)[:500]}


def model_job(rnd: Round, model_attempt: int) -> dict[str, Any]:
    """The input of a model-call activity: references only, never the transcript."""
    sub_id, job = rnd.submission_id, rnd.job
    return {
        "session_id": job["session_id"],
        "submission_id": sub_id,
        "attempt_key": f"{job['nonce']}:{sub_id}:model:{rnd.number}.{job['attempt']}"
        f":{model_attempt}",
        "timeout_s": rnd.limits.model_timeout_s,
        **({"tools": job["tools"]} if "tools" in job else {}),  # a loop run's tools
        **({"mcp": job["mcp"]} if "mcp" in job else {}),  # the turn's MCP catalogue
    }


def background_call(
    context: df.DurableOrchestrationContext, rnd: Round, model_attempt: int, holder: str
) -> Gen:
    """A background model call (``orchestrators/model_wait.py``): the slot is held only while
    the request is submitted, since the wait for its answer can outlast any slot lease."""
    job = model_job(rnd, model_attempt)
    submitted = yield from model_wait.submit(context, job)
    yield from release_slot(context, holder)
    if not submitted["ok"]:
        return submitted
    if rnd.cancel is None:
        rnd.cancel = context.wait_for_external_event(f"cancel:{rnd.round_id}")
    schedule = model_wait.PollSchedule.of(rnd.limits)
    return (
        yield from model_wait.wait(
            context, job, submitted, schedule, rnd.cancel, round=rnd.number, attempt=model_attempt
        )
    )


def release_slot(context: df.DurableOrchestrationContext, holder: str) -> Gen:
    """Release the slot and hand it over to the waiters the semaphore names."""
    now = context.current_utc_datetime.isoformat()
    released = yield context.call_entity(MODEL_SLOTS, "release", {"holder": holder, "now": now})
    for waiter in released.get("wake", []):
        yield context.call_activity(
            "hand_over", {"instance_id": waiter["instance_id"], "event": waiter["event"]}
        )


# --- commit the response and its tool tasks together, before any tool runs -------------------


def commit_response(
    context: df.DurableOrchestrationContext,
    rnd: Round,
    reply: dict[str, Any],
    response: ModelResponse,
) -> Gen:
    """Commit the response (a guard may stop the turn here); None to go on."""
    rnd.tokens += response.usage.total_tokens
    guard = check_guards(rnd.number, response, rnd.tokens, rnd.limits)
    committed = yield context.call_entity(
        rnd.entity,
        "commit",
        response_commit(
            rnd.job, rnd.round_id, reply, dict(guard) if guard else None, context.version
        ),
    )
    if not committed["ok"]:
        code = (committed.get("error") or {}).get("error")
        if code == "submission_finished":
            return {
                "kind": "stop",
                "status": SubmissionStatus.CANCELLED,
                "reason": "cancelled",
                "tokens_used": rnd.tokens,
            }
        return rnd.attention(f"commit_failed: {error_text(committed)}", phase="response")
    if guard:
        return rnd.stop(SubmissionStatus.FAILED, f"{guard['reason']}: {guard['message']}")
    return None


def _model_patch(round_id: str, response: ModelResponse, app_version: str = "") -> dict[str, Any]:
    usage = response.usage
    return {
        "id": ids.child_task_id(round_id, "model"),
        "kind": "model_call",
        "version": task_types.task_type("model_call").version_for(app_version),
        "parent": round_id,
        "status": TaskStatus.COMPLETED,
        "phase": "responded",
        "reason": f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens"
        f" ({response.model or 'model'})",
    }


def response_commit(
    job: dict[str, Any],
    round_id: str,
    reply: dict[str, Any],
    stop: dict[str, Any] | None,
    app_version: str | None = "",
) -> dict[str, Any]:
    """The one commit that holds a model response and the tool tasks it asks for.

    ``app_version``: the round's ``context.version``; the records carry the kind versions
    it follows."""
    tool_version = task_types.task_type("tool").version_for(app_version)
    response = ModelResponse.from_dict(reply["response"])
    calls = [] if stop else list(response.tool_calls)
    data = {
        "tool_calls": [c.to_dict() for c in response.tool_calls],
        "usage": response.usage.to_dict(),
        "model": response.model,
        "finish_reason": response.finish_reason,
        "round": job["round"],
    }
    if stop:
        data["stopped"] = stop["reason"]
    entry: dict[str, Any] = {"role": "assistant", "kind": "message", "data": data}
    if reply.get("content_ref"):
        entry["content_ref"] = reply["content_ref"]
    elif response.content is not None:
        entry["text"] = response.content
    round_phase = "stopped" if stop else ("tools" if calls else "answer")
    tasks = [
        {
            "id": round_id,
            "status": TaskStatus.RUNNING if calls else TaskStatus.COMPLETED,
            "phase": round_phase,
            **({"reason": f"{stop['reason']}: {stop['message']}"[:1000]} if stop else {}),
        },
        _model_patch(round_id, response, app_version or ""),
        *(
            {
                "id": ids.tool_task_id(job["submission_id"], job["round"], i),
                "kind": "tool",
                "version": tool_version,
                "parent": round_id,
                "status": TaskStatus.PENDING,
                "phase": f"call {c.name}"[:64],
            }
            for i, c in enumerate(calls)
        ),
        turn_patch(job["turn_id"], phase="tools" if calls else round_phase),
    ]
    return {"submission_id": job["submission_id"], "entries": [entry], "tasks": tasks}


# --- tools: one sub-orchestration per call, joined progressively ------------------------------


def run_tools(
    context: df.DurableOrchestrationContext, rnd: Round, calls: list[dict[str, Any]]
) -> Gen:
    """Run the tool tasks, close the round; ``continue`` unless a tool timed out."""
    set_status(context, "tools", round=rnd.number, calls=len(calls))
    children = [start_tool_task(context, rnd, i, call) for i, call in enumerate(calls)]
    results = yield from join_tool_tasks(context, children)
    closed = yield context.call_entity(rnd.entity, "commit", closing_commit(rnd, calls, results))
    if not closed["ok"]:
        return rnd.attention(f"commit_failed: {error_text(closed)}", phase="tools")
    timeouts = [calls[i]["name"] for i, r in results.items() if r.get("kind") == "timeout"]
    if timeouts:
        return rnd.stop(
            SubmissionStatus.FAILED,
            f"tool_timeout: {', '.join(timeouts)} did not finish within "
            f"{rnd.limits.tool_timeout_s:g} s",
        )
    return {"kind": "continue", "tokens_used": rnd.tokens}


def start_tool_task(
    context: df.DurableOrchestrationContext, rnd: Round, index: int, call: dict[str, Any]
) -> Any:
    job = rnd.job
    # An MCP server's tool (docs/tools.md) is its own orchestration, with the same id and input.
    name = "mcp_tool_task" if mcp_catalogue.is_mcp(str(call.get("name") or "")) else "tool_task"
    return context.call_sub_orchestrator(
        name,
        {
            "session_id": job["session_id"],
            "submission_id": rnd.submission_id,
            "turn_id": job["turn_id"],
            "round_id": rnd.round_id,
            "round": rnd.number,
            "index": index,
            "nonce": job["nonce"],
            "call": call,
            "limits": job["limits"],
            "approval_links": True,  # tool_task mails approval links (not to older tasks)
            "declarations": True,  # and applies the tools' limits and retries (idem)
            **({"tools": job["tools"]} if "tools" in job else {}),  # a loop run's tools
            **({"mcp": job["mcp"]} if "mcp" in job else {}),  # the turn's MCP catalogue
        },
        ids.tool_task_id(rnd.submission_id, rnd.number, index),
        version=child_version(context),
    )


def join_tool_tasks(context: df.DurableOrchestrationContext, children: list[Any]) -> Gen:
    """Every child's envelope by call index, in the order they end (``task_any`` loop)."""
    pending, results = list(children), {}
    while pending:
        done = yield context.task_any(pending)
        pending = [task for task in pending if task is not done]
        results[children.index(done)] = (
            done.result
            if isinstance(done.result, dict)
            else {
                "ok": False,
                "status": TaskStatus.FAILED,
                "kind": "tool_task_failed",
                "message": str(done.result)[:500],
                "failed_task": True,
            }
        )
    return results


def closing_commit(
    rnd: Round, calls: list[dict[str, Any]], results: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """The round's last commit: failed tool tasks closed, each with a result entry."""
    sub_id, round_no = rnd.submission_id, rnd.number
    failed = [i for i, r in results.items() if r.get("failed_task")]
    closing: dict[str, Any] = {
        "submission_id": sub_id,
        "tasks": [
            *(
                {
                    "id": ids.tool_task_id(sub_id, round_no, i),
                    "status": TaskStatus.FAILED,
                    "reason": results[i]["message"],
                }
                for i in failed
            ),
            {"id": rnd.round_id, "status": TaskStatus.COMPLETED, "phase": "done"},
        ],
    }
    if failed:  # every tool call needs a result the model can read
        closing["entries"] = [
            tool_failure_entry(
                calls[i], ids.tool_task_id(sub_id, round_no, i), results[i]["message"]
            )
            for i in failed
        ]
    return closing


def tool_failure_entry(call: dict[str, Any], tool_task_id: str, message: str) -> dict[str, Any]:
    result = {"ok": False, "kind": "tool_task_failed", "message": message[:1000]}
    return {
        "role": "tool",
        "kind": "message",
        "data": {
            "tool_call_id": call["id"],
            "tool_task_id": tool_task_id,
            "name": call["name"],
            "ok": False,
            "result": result,
        },
    }
