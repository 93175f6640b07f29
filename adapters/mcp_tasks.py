"""MCP tasks, the client half: a ``tools/call`` the server runs as a task, and its polls.

The tasks extension of MCP (``io.modelcontextprotocol/tasks``, protocol 2026-07-28): a client
that advertises it lets the server answer a ``tools/call`` with a *task* (``resultType:
"task"``, a ``taskId``, a ``status`` and a suggested ``pollIntervalMs``) instead of the
tool's result; the client then asks ``tasks/get`` until the task is ``completed`` (the tool's
``CallToolResult`` inlined as ``result``), ``failed`` (``error``), ``cancelled`` or
``input_required``, and may send ``tasks/cancel``. The server decides which calls become
tasks (tools declared for it); the client only says it can follow them.

What the kernel makes of it (``orchestrators/mcp_task.py``): the task id is the call's durable
handle. The activity that sent the call saves the handle in the attempt ledger as the call's
outcome before it returns, so a crash after that point never sends the call again: the
orchestration polls the task on durable timers, one activity per poll, and after a restart
polls the same task.

Everything here goes through the official SDK's public surface: a ``ClientExtension`` that
advertises the extension and claims the ``task`` result shape (never resolved in process:
``ClientSession.call_tool(..., allow_claimed=True)`` hands it back), and
``ClientSession.send_request`` with this module's request models.

* ``extension()``: the ``ClientExtension`` to pass to ``mcp.Client(extensions=[...])``.
* ``handle(result)``: the handle of a claimed result, ``{"taskId", "status",
  "pollIntervalMs", "ttlMs", "statusMessage"?}``; ``None`` when ``result`` is not a task.
* ``get(session, task_id, timeout_s)`` and ``cancel(session, task_id, timeout_s)``: one
  ``tasks/get`` / ``tasks/cancel``; ``get`` answers the task's wire fields (``status``,
  ``result``, ``error``, ``statusMessage``, ``pollIntervalMs``...).
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, RequestParams, Result
from pydantic import ConfigDict, Field

IDENTIFIER = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class _Task(Result):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    task_id: str = Field(alias="taskId", min_length=1, max_length=512)
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")


class CreatedTask(_Task):
    """A ``tools/call`` the server runs as a task (the claimed result shape)."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_Task):
    """A ``tasks/get`` answer: the task, with its outcome once it has one."""

    result_type: Literal["complete"] = Field(default="complete", alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class _TaskParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(serialization_alias="taskId")


class _GetTask(mcp_types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"


class _CancelTask(mcp_types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"


async def _not_here(created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
    # Never called: the kernel takes the task as a handle (allow_claimed) and polls it from
    # its orchestration, not inside the call.
    raise RuntimeError(f"task {created.task_id} is followed by the orchestration, not here")


class _TasksExtension(ClientExtension):
    identifier = IDENTIFIER

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=_not_here),)


def extension() -> ClientExtension:
    return _TasksExtension()


def _fields(task: _Task) -> dict[str, Any]:
    return {
        "taskId": task.task_id,
        "status": task.status,
        "pollIntervalMs": task.poll_interval_ms,
        "ttlMs": task.ttl_ms,
    } | ({"statusMessage": task.status_message[:500]} if task.status_message else {})


def handle(result: object) -> dict[str, Any] | None:
    return _fields(result) if isinstance(result, CreatedTask) else None


async def get(session: Any, task_id: str, timeout_s: float) -> dict[str, Any]:
    state = await session.send_request(
        _GetTask(params=_TaskParams(task_id=task_id)),
        TaskState,
        request_read_timeout_seconds=timeout_s,
    )
    found = _fields(state)
    if state.result is not None:
        found["result"] = state.result
    if state.error is not None:
        found["error"] = state.error
    return found


async def cancel(session: Any, task_id: str, timeout_s: float) -> None:
    await session.send_request(
        _CancelTask(params=_TaskParams(task_id=task_id)),
        mcp_types.Result,
        request_read_timeout_seconds=timeout_s,
    )
