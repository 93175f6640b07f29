"""The values the host's pure cores decide and its stores persist. Imports nothing of the host.

This is the neutral ground between the decision cores (``orchestration``, ``entity``,
``shim``) and the storage port (``store/``): a core returns an ``Episode`` or an
``EntityCommit``, a store persists it (with the ``Completion`` of each activity result the
episode took, when they commit together) and hands back ``InstanceRecord`` and
``ActivityWork`` values, and neither side imports the other.

Vocabularies:

* ``RuntimeStatus`` - the runtime statuses exactly as the Durable extension spells them on
  the wire. It is a ``StrEnum``, so a member equals its string and serialises as one: rows
  written before this module existed, and JSON answers, keep the plain strings.
* ``TERMINAL`` - the statuses after which an instance never runs again (until restarted).
* ``MessageKind`` - the kinds of inbox message (``Message["kind"]``).
* ``OutgoingKind`` - what an episode hands to the store besides its own history.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class RuntimeStatus(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    CONTINUED_AS_NEW = "ContinuedAsNew"
    FAILED = "Failed"
    CANCELED = "Canceled"
    TERMINATED = "Terminated"
    SUSPENDED = "Suspended"


TERMINAL: frozenset[str] = frozenset(
    {
        RuntimeStatus.COMPLETED,
        RuntimeStatus.FAILED,
        RuntimeStatus.TERMINATED,
        RuntimeStatus.CANCELED,
    }
)
# Statuses in which raised events wait in the inbox instead of being delivered.
HOLDING: frozenset[str] = frozenset(
    {RuntimeStatus.SUSPENDED, RuntimeStatus.CONTINUED_AS_NEW, RuntimeStatus.PENDING}
)


class MessageKind(enum.StrEnum):
    START = "start"  # an ExecutionStarted event: a new execution
    EVENT = "event"  # a history event to deliver (completion, timer, raised event)
    TERMINATE = "terminate"
    SUSPEND = "suspend"
    RESUME = "resume"
    REWIND = "rewind"
    OP = "op"  # an entity operation request
    UNDECODABLE = "undecodable"  # a stored message the store could not decode


class OutgoingKind(enum.StrEnum):
    ACTIVITY = "activity"  # run ``payload`` as an activity work item
    MESSAGE = "message"  # deliver ``payload`` to ``target``'s inbox


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message produced by an episode, committed atomically with it.

    ``kind`` is ``OutgoingKind.ACTIVITY`` (run ``payload`` as an activity work item) or
    ``OutgoingKind.MESSAGE`` (deliver ``payload`` to ``target``'s inbox, not before
    ``visible_at``).
    """

    kind: str
    target: str
    payload: dict[str, Any]
    visible_at: str | None = None


@dataclass(slots=True)
class Episode:
    """What one orchestration episode decided; a store commits all of it or nothing."""

    consumed: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    replace_history: bool = False  # a new execution starts (start or continue-as-new)
    rewrite_history: bool = False  # same execution, history rewritten (rewind): events is all of it
    execution_id: str | None = None
    status: str | None = None  # None: unchanged
    output_json: str | None = None
    custom_status_json: str | None = None
    custom_status_changed: bool = False
    name: str | None = None
    input_json: str | None = None
    version: str | None = None
    parent: dict[str, Any] | None = None
    outbox: list[Outgoing] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EntityCommit:
    """One entity batch: new state, consumed operations, responses to callers."""

    instance_id: str
    consumed: list[int]
    exists: bool
    state_json: str | None
    responses: list[tuple[str, dict[str, Any]]]  # (caller instance id, message)
    now: str


@dataclass(slots=True)
class InstanceRecord:
    instance_id: str
    name: str
    status: str
    execution_id: str | None = None
    version: str | None = None
    input_json: str | None = None
    output_json: str | None = None
    custom_status_json: str | None = None
    created_at: str = ""
    updated_at: str = ""
    parent_instance_id: str | None = None
    entity_state: str | None = None
    entity_exists: bool = False


@dataclass(frozen=True, slots=True)
class ActivityWork:
    work_id: int
    instance_id: str
    execution_id: str
    task_id: int
    name: str
    input_json: str | None
    dequeue_count: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    """An activity's result committed together with the episode it unblocks (``commit_step``).

    ``consumed``: the episode took the result as an event; otherwise (the instance holds
    events, e.g. while suspended) the commit puts it in the inbox, as a separate completion
    would have.
    """

    work_id: int
    message: dict[str, Any]
    consumed: bool


@dataclass(frozen=True, slots=True)
class Query:
    created_from: str | None = None
    created_to: str | None = None
    statuses: tuple[str, ...] = ()
    prefix: str | None = None
    top: int | None = None
    continuation: str | None = None
    entities: bool | None = False  # False: orchestrations only, True: entities only
    updated_from: str | None = None
    updated_to: str | None = None


@dataclass(frozen=True, slots=True)
class QueryPage:
    records: list[InstanceRecord] = field(default_factory=list)
    continuation: str | None = None
