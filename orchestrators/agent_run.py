"""``agent_run`` and ``agent_round``: the rounds of one turn, each round its own orchestration.

``agent_run`` is called by ``agent_turn`` with ``{session_id, submission_id, request_id,
text|text_ref, settings, turn_instance_id}`` and returns ``{"status": completed|failed|cancelled,
"answer", "reason"}``. It only sequences rounds, so its history grows by a few events per round:

    round 1 -> round 2 -> ... -> answer | stop (guard, tool timeout, cancel)
                  \\-> needs_attention -> operator retry (the same round again) | abort | timeout

Each round is the sub-orchestration ``agent_round`` (id ``{run}:round-{n}``, ``.{k}`` for the
k-th operator retry) with the phases prepare -> request (-> retry) -> tools:

1. prepare: stop if the submission is finished or a cancel was requested; record the round task.
2. request: take a model-call slot from the ``semaphore`` entity, call ``call_model`` with a
   reference (session id + submission id, never the transcript), release the slot. Failures
   come back as envelopes; ``kernel.turn_policy.next_retry_delay`` decides the durable timer
   before the next attempt (backoff, the provider's Retry-After, no retry for fatal errors).
3. One commit holds the model response (the assistant entry, with token usage) and the tool
   tasks it asks for, before any tool runs; ``check_guards`` may stop the turn instead.
4. tools: one ``tool_task`` sub-orchestration per call (id ``kernel.ids.tool_task_id``); they
   return envelopes and are joined with a progressive ``task_any`` loop.

A round that cannot go on (a model phase that keeps failing, a commit the session refuses)
returns ``attention``: the run parks as ``needs_attention`` with the facts in its custom status
and the turn task, and waits for ``operator:{run}:{n}`` (a unique name per wait) raced with
``AGENT_ATTENTION_TIMEOUT_S``. ``retry`` runs the round again from the last committed round;
``abort`` and the timeout end the turn as ``failed`` with the recorded reason.

The phase is mirrored in a small custom status (``{"phase", "round", ...}``, at most 1 KB, never
empty) and in the session's task graph (turn -> round -> model call, tool tasks).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from kernel import ids
from kernel.model_io import ModelResponse
from kernel.turn_policy import TurnLimits, TurnSettingsError, check_guards, next_retry_delay
from orchestrators.agent_turn import session_entity

bp = df.Blueprint()
MODEL_SLOTS = df.EntityId("semaphore", "model")
SLOT_POLL = timedelta(seconds=5)  # waiters re-check in case a wake-up was lost
MAX_SLOT_WAITS = 720
MAX_PARKS = 10
STATUS_LIMIT = 1000
TERMINAL = ("completed", "failed", "cancelled")


# --- small pure helpers shared by the turn's orchestrators -------------------------------------


def set_status(context: df.DurableOrchestrationContext, phase: str, **fields: Any) -> None:
    """Publish ``{"phase", ...}``: never empty, and cut to stay under ``STATUS_LIMIT`` bytes."""
    value = {"phase": phase, **{k: v for k, v in fields.items() if v is not None}}
    if len(json.dumps(value)) > STATUS_LIMIT:
        value = {k: (v[:200] if isinstance(v, str) else v) for k, v in value.items()}
    if len(json.dumps(value)) > STATUS_LIMIT:
        value = {"phase": phase, "round": fields.get("round")}
    context.set_custom_status(value)


def event_payload(value: Any) -> dict[str, Any]:
    """An external event's payload as an object (the SDK client sends JSON text, SDK #295)."""
    for _ in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except ValueError:
            break
    return value if isinstance(value, dict) else {"value": value}


def error_text(envelope: dict[str, Any]) -> str:
    error = envelope.get("error") or {}
    return f"{error.get('error', 'error')}: {error.get('message', '')}"[:500]


def outcome(status: str, answer: str | None = None, reason: str | None = None) -> dict[str, Any]:
    return {"status": status, "answer": answer, "reason": reason}


def turn_patch(
    turn_id: str, status: str | None = None, phase: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    patch: dict[str, Any] = {"id": turn_id}
    for key, value in (("status", status), ("phase", phase), ("reason", reason)):
        if value is not None:
            patch[key] = value[:1000] if key == "reason" else value
    return patch


# --- agent_run --------------------------------------------------------------------------------


@bp.orchestration_trigger(context_name="context")
def agent_run(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    entity = session_entity(job["session_id"])
    turn_id = job["turn_instance_id"]
    set_status(context, "prepare")
    if job.get("settings") is not None:
        try:
            read = {"ok": True, "limits": TurnLimits.from_settings(job["settings"]).to_dict()}
        except TurnSettingsError as exc:
            read = {"ok": False, "message": str(exc)}
    else:  # read in an activity: settings (and their secrets) stay out of histories
        read = yield context.call_activity("turn_limits", {"turn": turn_id})
    if not read["ok"]:
        reason = f"invalid_settings: {read['message']}"
        set_status(context, "failed", reason=reason)
        yield context.call_entity(entity, "commit", {"tasks": [turn_patch(turn_id, reason=reason)]})
        return outcome("failed", reason=reason)
    base = {
        "session_id": job["session_id"],
        "submission_id": job["submission_id"],
        "turn_id": turn_id,
        "run_id": context.instance_id,
        # Keys this run's ledger records: stable across replays, new for every run.
        "nonce": str(context.new_uuid()),
        "limits": read["limits"],
    }
    limits = TurnLimits.from_dict(read["limits"])
    tokens, round_no, attempt, parks, operator = 0, 1, 1, 0, None
    while round_no <= limits.max_rounds:
        set_status(context, "round", round=round_no, attempt=attempt, operator=operator)
        key = f"round-{round_no}" if attempt == 1 else f"round-{round_no}.{attempt}"
        try:
            result = yield context.call_sub_orchestrator(
                "agent_round",
                {**base, "round": round_no, "attempt": attempt, "tokens_used": tokens},
                ids.child_task_id(context.instance_id, key),
            )
        except Exception as exc:  # noqa: BLE001 - a failed round is a fact to act on
            result = {
                "kind": "attention",
                "reason": f"round_failed: {exc}"[:500],
                "tokens_used": tokens,
            }
        tokens = int(result.get("tokens_used", tokens))
        if result["kind"] == "continue":
            round_no, attempt = round_no + 1, 1
            continue
        if result["kind"] == "answer":
            set_status(context, "answer", round=round_no, tokens=tokens, operator=operator)
            return outcome("completed", answer=result.get("answer"))
        if result["kind"] == "stop":
            set_status(
                context, "stopped", round=round_no, reason=result["reason"], operator=operator
            )
            yield context.call_entity(
                entity,
                "commit",
                {"tasks": [turn_patch(turn_id, phase="stopped", reason=result["reason"])]},
            )
            return outcome(result["status"], reason=result["reason"])
        # attention: park until an operator decides, bounded in time and in count
        parks += 1
        reason = result.get("reason") or "the round cannot continue"
        event = f"operator:{context.instance_id}:{parks}"
        deadline = context.current_utc_datetime + timedelta(seconds=limits.attention_timeout_s)
        yield context.call_entity(
            entity,
            "commit",
            {
                "tasks": [
                    turn_patch(
                        turn_id, status="needs_attention", phase=f"round {round_no}", reason=reason
                    )
                ]
            },
        )
        set_status(
            context,
            "needs_attention",
            round=round_no,
            reason=reason,
            event=event,
            until=deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
            operator=operator,
        )
        decision_event = context.wait_for_external_event(event)
        timeout = context.create_timer(deadline)
        winner = yield context.task_any([decision_event, timeout])
        if winner == decision_event:
            timeout.cancel()
            decision = event_payload(decision_event.result)
        else:
            decision = {"action": "timeout"}
        operator = {"request_id": decision.get("requestId"), "action": decision.get("action")}
        if decision.get("action") == "retry" and parks < MAX_PARKS:
            attempt += 1
            continue
        final = {"abort": "aborted by the operator", "retry": "too many operator retries"}.get(
            str(decision.get("action")), "nobody attended to it in time"
        )
        reason = f"needs_attention, {final}: {reason}"[:1000]
        set_status(context, "stopped", round=round_no, reason=reason, operator=operator)
        yield context.call_entity(
            entity,
            "commit",
            {"tasks": [turn_patch(turn_id, status="running", phase="stopped", reason=reason)]},
        )
        return outcome("failed", reason=reason)
    reason = f"max_rounds: no answer after {limits.max_rounds} rounds"
    return outcome("failed", reason=reason)


# --- agent_round ------------------------------------------------------------------------------


def _model_patch(round_id: str, response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "id": ids.child_task_id(round_id, "model"),
        "kind": "model_call",
        "parent": round_id,
        "status": "completed",
        "phase": "responded",
        "reason": f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens"
        f" ({response.model or 'model'})",
    }


def response_commit(
    job: dict[str, Any], round_id: str, reply: dict[str, Any], stop: dict[str, Any] | None
) -> dict[str, Any]:
    """The one commit that holds a model response and the tool tasks it asks for."""
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
            "status": "running" if calls else "completed",
            "phase": round_phase,
            **({"reason": f"{stop['reason']}: {stop['message']}"[:1000]} if stop else {}),
        },
        _model_patch(round_id, response),
        *(
            {
                "id": ids.tool_task_id(job["submission_id"], job["round"], i),
                "kind": "tool",
                "parent": round_id,
                "status": "pending",
                "phase": f"call {c.name}"[:64],
            }
            for i, c in enumerate(calls)
        ),
        turn_patch(job["turn_id"], phase="tools" if calls else round_phase),
    ]
    return {"submission_id": job["submission_id"], "entries": [entry], "tasks": tasks}


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


@bp.orchestration_trigger(context_name="context")
def agent_round(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    job: dict[str, Any] = context.get_input()
    limits = TurnLimits.from_dict(job["limits"])
    entity = session_entity(job["session_id"])
    round_id, round_no, sub_id = context.instance_id, job["round"], job["submission_id"]
    tokens = int(job["tokens_used"])

    def attention(reason: str, **facts: Any) -> dict[str, Any]:
        return {"kind": "attention", "reason": reason[:1000], "facts": facts, "tokens_used": tokens}

    # prepare
    set_status(context, "prepare", round=round_no)
    view = yield context.call_entity(entity, "submission_view", {"submission_id": sub_id})
    if not view["ok"]:
        return attention(f"session_unavailable: {error_text(view)}", phase="prepare")
    submission = view["result"]
    if submission["status"] in TERMINAL or submission.get("cancel_requested_at"):
        return {
            "kind": "stop",
            "status": "cancelled",
            "tokens_used": tokens,
            "reason": f"cancelled: {submission.get('cancel_reason') or 'cancel requested'}",
        }
    opened = yield context.call_entity(
        entity,
        "commit",
        {
            "submission_id": sub_id,
            "tasks": [
                {
                    "id": round_id,
                    "kind": "round",
                    "parent": job["turn_id"],
                    "status": "running",
                    "phase": "request",
                },
                turn_patch(job["turn_id"], status="running", phase=f"request (round {round_no})"),
            ],
        },
    )
    if not opened["ok"]:
        return attention(f"commit_failed: {error_text(opened)}", phase="prepare")

    # request, with durable retries
    reply: dict[str, Any] = {"ok": False, "kind": "transient", "message": "not asked yet"}
    for model_attempt in range(1, limits.max_model_attempts + 1):
        holder = f"{round_id}:{model_attempt}"
        for wait_no in range(1, MAX_SLOT_WAITS + 1):
            event = f"slot:{holder}:{wait_no}"
            slot = yield context.call_entity(
                MODEL_SLOTS,
                "acquire",
                {
                    "holder": holder,
                    "instance_id": round_id,
                    "event": event,
                    "limit": limits.max_concurrent_model_calls,
                    "lease_s": limits.model_timeout_s + 60,
                    "now": context.current_utc_datetime.isoformat(),
                },
            )
            if slot["granted"]:
                break
            set_status(context, "waiting", round=round_no, slot_position=slot["position"])
            woken = context.wait_for_external_event(event)
            poll = context.create_timer(context.current_utc_datetime + SLOT_POLL)
            winner = yield context.task_any([woken, poll])
            if winner == woken:
                poll.cancel()
                break  # the releaser handed its slot to this holder
        set_status(context, "request", round=round_no, attempt=model_attempt)
        try:
            reply = yield context.call_activity(
                "call_model",
                {
                    "session_id": job["session_id"],
                    "submission_id": sub_id,
                    "attempt_key": f"{job['nonce']}:{sub_id}:model:{round_no}.{job['attempt']}"
                    f":{model_attempt}",
                    "timeout_s": limits.model_timeout_s,
                },
            )
        except Exception as exc:  # noqa: BLE001 - an activity crash is a transient failure
            reply = {"ok": False, "kind": "transient", "message": str(exc)[:500]}
        now = context.current_utc_datetime.isoformat()
        released = yield context.call_entity(MODEL_SLOTS, "release", {"holder": holder, "now": now})
        for waiter in released.get("wake", []):
            yield context.call_activity(
                "hand_over", {"instance_id": waiter["instance_id"], "event": waiter["event"]}
            )
        if reply["ok"]:
            break
        delay = next_retry_delay(model_attempt, reply, limits)
        if delay is None:
            return attention(
                f"model_{reply['kind']}: {reply.get('message')}",
                phase="request",
                attempts=model_attempt,
            )
        set_status(
            context,
            "retry",
            round=round_no,
            attempt=model_attempt,
            kind=reply["kind"],
            delay_s=delay,
        )
        yield context.create_timer(context.current_utc_datetime + timedelta(seconds=delay))
    if not reply["ok"]:
        return attention(f"model_{reply['kind']}: {reply.get('message')}", phase="request")

    # commit the response and its tool tasks together, before any tool runs
    response = ModelResponse.from_dict(reply["response"])
    tokens += response.usage.total_tokens
    guard = check_guards(round_no, response, tokens, limits)
    committed = yield context.call_entity(
        entity, "commit", response_commit(job, round_id, reply, dict(guard) if guard else None)
    )
    if not committed["ok"]:
        code = (committed.get("error") or {}).get("error")
        if code == "submission_finished":
            return {
                "kind": "stop",
                "status": "cancelled",
                "reason": "cancelled",
                "tokens_used": tokens,
            }
        return attention(f"commit_failed: {error_text(committed)}", phase="response")
    if guard:
        return {
            "kind": "stop",
            "status": "failed",
            "tokens_used": tokens,
            "reason": f"{guard['reason']}: {guard['message']}",
        }
    if not response.tool_calls:
        return {"kind": "answer", "answer": response.content, "tokens_used": tokens}

    # tools: one sub-orchestration per call, joined progressively
    set_status(context, "tools", round=round_no, calls=len(response.tool_calls))
    calls = [c.to_dict() for c in response.tool_calls]
    children = [
        context.call_sub_orchestrator(
            "tool_task",
            {
                "session_id": job["session_id"],
                "submission_id": sub_id,
                "turn_id": job["turn_id"],
                "round_id": round_id,
                "round": round_no,
                "index": i,
                "nonce": job["nonce"],
                "call": call,
                "limits": job["limits"],
            },
            ids.tool_task_id(sub_id, round_no, i),
        )
        for i, call in enumerate(calls)
    ]
    pending, results = list(children), {}
    while pending:
        done = yield context.task_any(pending)
        pending = [task for task in pending if task is not done]
        index = children.index(done)
        results[index] = (
            done.result
            if isinstance(done.result, dict)
            else {
                "ok": False,
                "status": "failed",
                "kind": "tool_task_failed",
                "message": str(done.result)[:500],
                "failed_task": True,
            }
        )
    failed = [i for i, r in results.items() if r.get("failed_task")]
    timeouts = [calls[i]["name"] for i, r in results.items() if r.get("kind") == "timeout"]
    closing: dict[str, Any] = {
        "submission_id": sub_id,
        "tasks": [
            *(
                {
                    "id": ids.tool_task_id(sub_id, round_no, i),
                    "status": "failed",
                    "reason": results[i]["message"],
                }
                for i in failed
            ),
            {"id": round_id, "status": "completed", "phase": "done"},
        ],
    }
    if failed:  # every tool call needs a result the model can read
        closing["entries"] = [
            tool_failure_entry(
                calls[i], ids.tool_task_id(sub_id, round_no, i), results[i]["message"]
            )
            for i in failed
        ]
    closed = yield context.call_entity(entity, "commit", closing)
    if not closed["ok"]:
        return attention(f"commit_failed: {error_text(closed)}", phase="tools")
    if timeouts:
        return {
            "kind": "stop",
            "status": "failed",
            "tokens_used": tokens,
            "reason": f"tool_timeout: {', '.join(timeouts)} did not finish within "
            f"{limits.tool_timeout_s:g} s",
        }
    return {"kind": "continue", "tokens_used": tokens}
