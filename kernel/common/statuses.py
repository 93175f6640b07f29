"""The app's status vocabulary: task records and submissions. Pure.

Both are ``StrEnum``s, so a member is the plain string it names wherever it is stored, compared
or serialised (``json.dumps(TaskStatus.COMPLETED) == '"completed"'``). The strict request models
of ``kernel.session.requests`` need ``Literal`` types (strict pydantic accepts no plain string for an
enum), so the same values are spelt once more here as literals; a unit test keeps both equal.

Task records (``kernel.session.tasks``) move forward by rank::

    pending -> running | waiting | sleeping | needs_attention -> completing
            -> completed | failed | cancelled | interrupted (terminal)

Submissions (``kernel.session.submissions``): queued -> active -> completed | failed | cancelled, or
queued -> failed | cancelled. A final submission status is also what a turn and its run end
with.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class TaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SLEEPING = "sleeping"
    NEEDS_ATTENTION = "needs_attention"
    COMPLETING = "completing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class SubmissionStatus(StrEnum):
    QUEUED = "queued"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_TASK_STATUSES = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.INTERRUPTED}
)
FINAL_SUBMISSION_STATUSES = frozenset(
    {SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.CANCELLED}
)
# The Durable runtime statuses of an instance that has ended (the management API's names).
ENDED_RUNTIME_STATUSES = frozenset({"Completed", "Failed", "Terminated", "Canceled"})

TaskStatusValue = Literal[
    "pending", "running", "waiting", "sleeping", "completing",
    "completed", "failed", "cancelled", "interrupted", "needs_attention",
]  # fmt: skip
FinalStatusValue = Literal["completed", "failed", "cancelled"]
# The tiers of a task under a failure policy (``kernel.turn.failures.TIERS``, kept equal by a test).
TierValue = Literal["ok", "retried", "handled", "needs_attention"]
