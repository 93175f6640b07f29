"""The session's task graph: records of tasks, their status, phase and parent. Pure.

A task record is ``{id, kind, version, status, phase, parent, children, created_at,
updated_at, reason}``, plus ``tier`` for a task run under a failure policy (``ok``,
``retried``, ``handled``, ``needs_attention``: ``kernel/turn/failures.py``), set once a commit
names it; ``id`` is the task's orchestration instance id.

Status moves only forward, by rank::

    pending (0) -> running | waiting | sleeping | needs_attention (1) -> completing (2)
                -> completed | failed | cancelled | interrupted (3, terminal)

Within rank 1 any move is allowed (a running task waits on children, then runs again);
a move to a lower rank or out of a terminal status raises ``ConflictError("invalid_transition")``.
Repeating the current status is allowed, so a phase update can restate it.

Contract:
* ``kind``, ``version`` and ``parent`` are fixed once set; a different value is a conflict.
* ``parent`` must already exist (in the state, or earlier in the same commit), so the graph
  is a forest by construction: no cycles, no dangling parents.
* ``children`` is derived: creating a task appends it to its parent's ``children``.
"""

from __future__ import annotations

from typing import Any

from kernel.common.errors import ConflictError, NotFoundError, ValidationError
from kernel.common.statuses import TERMINAL_TASK_STATUSES, TaskStatus
from kernel.session.requests import TaskPatch
from kernel.session.state import State

_RANK: dict[str, int] = {
    TaskStatus.PENDING: 0,
    TaskStatus.RUNNING: 1,
    TaskStatus.WAITING: 1,
    TaskStatus.SLEEPING: 1,
    TaskStatus.NEEDS_ATTENTION: 1,
    TaskStatus.COMPLETING: 2,
    **dict.fromkeys(TERMINAL_TASK_STATUSES, 3),
}
_FIXED_FIELDS = ("kind", "version", "parent")


def can_transition(old: str, new: str) -> bool:
    if old == new:
        return True
    old_rank, new_rank = _RANK[old], _RANK[new]
    return new_rank > old_rank or new_rank == old_rank == 1


def upsert_task(state: State, patch: TaskPatch, *, at: str, field: str) -> dict[str, Any]:
    """Create or update one task in ``state`` (a working copy); return its change item."""
    task = state["tasks"].get(patch.id)
    if task is None:
        task = _create(state, patch, at=at, field=field)
    else:
        _update(task, patch, at=at, field=field)
    return {"type": "task", "id": task["id"], "status": task["status"], "phase": task["phase"]}


def _create(state: State, patch: TaskPatch, *, at: str, field: str) -> dict[str, Any]:
    if patch.kind is None:
        raise ValidationError("missing_kind", "a new task needs a kind", f"{field}.kind")
    if patch.parent is not None:
        parent = state["tasks"].get(patch.parent)
        if parent is None:
            raise NotFoundError("unknown_parent", f"no task {patch.parent!r}", f"{field}.parent")
        parent["children"].append(patch.id)
        parent["updated_at"] = at
    task: dict[str, Any] = {
        "id": patch.id,
        "kind": patch.kind,
        "version": patch.version,
        "status": patch.status or TaskStatus.PENDING,
        "phase": patch.phase,
        "parent": patch.parent,
        "children": [],
        "created_at": at,
        "updated_at": at,
        "reason": patch.reason,
    }
    if patch.tier is not None:  # only tasks under a failure policy have one
        task["tier"] = patch.tier
    state["tasks"][patch.id] = task
    return task


def _update(task: dict[str, Any], patch: TaskPatch, *, at: str, field: str) -> None:
    given = patch.model_fields_set
    for name in _FIXED_FIELDS:
        value = getattr(patch, name)
        if name not in given or value == task[name]:
            continue
        if name == "version" and task[name] is None:  # learnt after the record was created
            task[name] = value
            continue
        raise ConflictError(
            "immutable_field", f"task {task['id']!r} has {name} {task[name]!r}", f"{field}.{name}"
        )
    if patch.status is not None:
        if not can_transition(task["status"], patch.status):
            raise ConflictError(
                "invalid_transition",
                f"task {task['id']!r} cannot go from {task['status']} to {patch.status}",
                f"{field}.status",
            )
        task["status"] = patch.status
    for name in ("phase", "reason"):
        if name in given:
            task[name] = getattr(patch, name)
    if patch.tier is not None:
        task["tier"] = patch.tier
    task["updated_at"] = at


def close_task(task: dict[str, Any], status: str, *, at: str, reason: str | None) -> bool:
    """Move a task to terminal ``status`` unless it already is terminal; True if it moved."""
    if task["status"] in TERMINAL_TASK_STATUSES:
        return False
    task["status"] = status
    task["updated_at"] = at
    if reason is not None:
        task["reason"] = reason
    return True
