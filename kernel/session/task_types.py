"""Durable task types: kind -> version (and input schema), and the notices contract. Pure.

Every kind of task in the session's task graph - ``turn``, ``round``, ``model_call``, ``tool``,
``send_notices``, ``send_notice`` - is registered here with its version, and its task record
carries ``kind`` and ``version``, so a reader of the task graph knows which code and which
input shape produced it. A custom task is an orchestration whose name is its ``kind``.

Versions (docs/versioning.md): the app is deployed with an orchestration version (host.json
``defaultVersion``) and every instance keeps the one it started with (``context.version``).
A kind's version changes when its orchestrator changes in a way that is not replay-safe; the
kind then records, in ``since``, the first app version that runs the new behaviour, and the
orchestrator branches with ``TaskType.follows`` (``kernel.common.versions.compare``, the runtime's
comparison), keeping the old path for instances of older app versions.

Contract:
* ``TASK_TYPES`` maps a kind to a ``TaskType`` (kind, version, input model, orchestrator,
  ``since``). ``version_for(app_version)`` is the kind version an instance of that app
  version follows; the last entry of ``since`` is the current ``version``. ``parse_input``
  validates an input against its kind's model and returns the model, or raises a
  ``ValidationError`` whose ``code`` says what is wrong and whose ``field`` says where
  (``recipients[2]``). Models are strict and refuse unknown fields.
* ``send_notices`` (the parent) checks everything that can be checked without IO before
  anything is sent: at least one and at most ``MAX_RECIPIENTS`` recipients
  (``no_recipients`` / ``too_many_recipients``), each a valid address (``invalid_recipient``),
  no address twice, compared case-insensitively (``duplicate_recipient``), exactly one of
  ``body`` and ``body_ref`` (``missing_body`` / ``ambiguous_body``; ``empty_body``).
  Whether a ``body_ref`` exists is a question for the stores, asked by an activity.
* ``notice_operation_id`` is the stable id of one external send: a pure function of the parent
  task, the recipient (case-folded) and the body reference. A replay, a re-execution or a
  recovery computes the same id, so the mail service can answer "already accepted".
* ``NoticeSettings`` bounds every loop of the workflow in count and time; defaults suit
  production, tests pass short intervals.
* ``summarize`` and ``final_status`` turn per-recipient outcomes into the parent's summary line
  and its terminal task status.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, ConfigDict, Field

from kernel.common import ids, versions
from kernel.common.content import CONTENT_REF_PATTERN
from kernel.common.errors import KernelError, ValidationError
from kernel.common.statuses import TaskStatus
from kernel.session.documents import DOCUMENT_ID_PATTERN, MAX_RECIPIENTS, Email

Outcome = Literal["confirmed", "rejected", "cancelled", "uncertain", "failed"]
OUTCOMES: tuple[str, ...] = ("confirmed", "rejected", "cancelled", "uncertain", "failed")
MAX_BODY_CHARS = 32_000
MAX_SUBJECT_CHARS = 200
BODY_REF_PATTERN = f"{CONTENT_REF_PATTERN}|{DOCUMENT_ID_PATTERN}"
# Task statuses of a finished child, by its outcome: an uncertain send is surfaced as
# interrupted (a person has to look), never closed as if it were known.
CHILD_STATUS: dict[str, TaskStatus] = {
    "confirmed": TaskStatus.COMPLETED,
    "rejected": TaskStatus.FAILED,
    "failed": TaskStatus.FAILED,
    "cancelled": TaskStatus.CANCELLED,
    "uncertain": TaskStatus.INTERRUPTED,
}

_EMAIL = pydantic.TypeAdapter(Email)


def _check(fn: Any) -> AfterValidator:
    return AfterValidator(lambda value: fn(value, None))


class _Strict(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Seconds = Annotated[float, Field(ge=0, le=3600)]


class NoticeSettings(_Strict):
    """Budgets of the notices workflow. Every loop is bounded by one of these."""

    max_parallel: Annotated[int, Field(ge=1, le=MAX_RECIPIENTS)] = 10
    send_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    retry_backoff_s: Seconds = 5.0
    max_retry_after_s: Seconds = 60.0
    confirm_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    confirm_interval_s: Seconds = 10.0
    cancel_grace_s: Seconds = 30.0


def _subject(value: str) -> str:
    if not value.strip() or "\r" in value or "\n" in value:
        raise ValidationError("invalid_subject", "subject must be one non-empty line")
    return value


def _body(value: str) -> str:
    if not value.strip():
        raise ValidationError("empty_body", "body must not be empty")
    return value


class SendNoticesInput(_Strict):
    """Input of ``send_notices``: who gets which notice, and how failures are joined."""

    session_id: Annotated[str, _check(ids.validate_session_id)]
    submission_id: Annotated[str, _check(ids.validate_key)]
    tool_task_id: Annotated[str, _check(ids.validate_instance_id)] | None = None
    recipients: list[str]
    subject: Annotated[
        str, Field(min_length=1, max_length=MAX_SUBJECT_CHARS), AfterValidator(_subject)
    ]
    body: Annotated[str, Field(max_length=MAX_BODY_CHARS), AfterValidator(_body)] | None = None
    body_ref: Annotated[str, Field(pattern=BODY_REF_PATTERN)] | None = None
    policy: Literal["allSettled", "failFast"] = "allSettled"
    settings: NoticeSettings = Field(default_factory=NoticeSettings)

    @pydantic.field_validator("recipients")
    @classmethod
    def _recipients(cls, recipients: list[str]) -> list[str]:
        return check_recipients(recipients)

    @pydantic.model_validator(mode="after")
    def _one_body(self) -> SendNoticesInput:
        if self.body is None and self.body_ref is None:
            raise ValidationError("missing_body", "give body (text) or body_ref", "body")
        if self.body is not None and self.body_ref is not None:
            raise ValidationError("ambiguous_body", "give body or body_ref, not both", "body_ref")
        return self


class SendNoticeInput(_Strict):
    """Input of one ``send_notice`` child, built by the parent (never by a caller)."""

    session_id: Annotated[str, _check(ids.validate_session_id)]
    parent_id: Annotated[str, _check(ids.validate_instance_id)]
    plan_id: Annotated[str, Field(pattern=DOCUMENT_ID_PATTERN)]
    recipient: str
    subject: str
    body_ref: str
    operation_id: str
    settings: NoticeSettings


@dataclass(frozen=True, slots=True)
class TaskType:
    kind: str
    version: str
    input_model: type[pydantic.BaseModel] | None = None  # None: its input is checked elsewhere
    orchestrator: str | None = None  # the orchestration that runs it (None: a step's record)
    # (kind version, first app version that runs it), oldest first; "" = since the beginning
    since: tuple[tuple[str, str], ...] = (("1", ""),)

    def version_for(self, app_version: str | None) -> str:
        """The kind version an instance of ``app_version`` follows."""
        chosen = self.since[0][0]
        for kind_version, first in self.since:
            if versions.at_least(app_version, first):
                chosen = kind_version
        return chosen

    def follows(self, app_version: str | None, kind_version: str) -> bool:
        """Does an instance of ``app_version`` follow ``kind_version`` of this kind or later?"""
        first = dict(self.since)[kind_version]
        return versions.at_least(app_version, first)


TASK_TYPES: dict[str, TaskType] = {
    "turn": TaskType("turn", "1", orchestrator="agent_turn"),
    "round": TaskType("round", "1", orchestrator="agent_round"),
    "model_call": TaskType("model_call", "1"),
    "tool": TaskType("tool", "1", orchestrator="tool_task"),
    "send_notices": TaskType("send_notices", "1", SendNoticesInput, "send_notices"),
    "send_notice": TaskType("send_notice", "1", SendNoticeInput, "send_notice"),
}


def task_type(kind: str) -> TaskType:
    try:
        return TASK_TYPES[kind]
    except KeyError:
        known = ", ".join(sorted(TASK_TYPES))
        raise ValidationError("unknown_task_kind", f"known kinds: {known}", "kind") from None


def parse_input(kind: str, data: object) -> Any:
    """The validated input model of ``kind``, or a ``ValidationError`` naming the field."""
    model = task_type(kind).input_model
    if model is None:
        raise ValidationError("no_input_model", f"{kind} tasks take no input here", "kind")
    if not isinstance(data, Mapping):
        raise ValidationError("invalid_input", "the input must be a JSON object", None)
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValidationError.from_pydantic(exc, code="invalid_input") from exc


def check_recipients(recipients: Sequence[str]) -> list[str]:
    """Recipients as given, or the first problem: empty, too many, invalid, duplicate."""
    if not recipients:
        raise ValidationError("no_recipients", "recipients must list at least one address")
    if len(recipients) > MAX_RECIPIENTS:
        raise ValidationError(
            "too_many_recipients", f"at most {MAX_RECIPIENTS} recipients per notice"
        )
    seen: dict[str, int] = {}
    for index, address in enumerate(recipients):
        try:
            _EMAIL.validate_python(address)
        except pydantic.ValidationError:
            raise ValidationError(
                "invalid_recipient", f"not a valid email address: {address!r}", f"[{index}]"
            ) from None
        # Mail systems treat addresses case-insensitively: a notice must not reach one
        # person twice because the list spelt the address two ways.
        key = address.casefold()
        if key in seen:
            raise ValidationError(
                "duplicate_recipient",
                f"{address!r} is listed twice (also at position {seen[key]})",
                f"[{index}]",
            )
        seen[key] = index
    return list(recipients)


def settings_from(base: Mapping[str, Any], override: NoticeSettings | None) -> NoticeSettings:
    """App-setting values overlaid by the fields an input set explicitly."""
    explicit = override.model_dump(exclude_unset=True) if override is not None else {}
    try:
        return NoticeSettings.model_validate({**base, **explicit})
    except pydantic.ValidationError as exc:
        raise ValidationError.from_pydantic(exc, code="invalid_setting", at="settings") from exc


def notice_operation_id(parent_id: str, recipient: str, body_ref: str) -> str:
    """The idempotency key of the send of ``body_ref`` to ``recipient`` for ``parent_id``."""
    name = f"notice:{parent_id}:{recipient.casefold()}:{body_ref}"
    return f"notice-{uuid.uuid5(ids.NAMESPACE, name)}"


def plan_document_id(parent_id: str) -> str:
    # Instance ids contain ":" which document ids do not allow, hence a derived name.
    return f"notices-{uuid.uuid5(ids.NAMESPACE, f'notice-plan:{parent_id}').hex}"


def body_document_id(plan_id: str) -> str:
    """Where a body given as text is stored: a ``note`` next to its plan."""
    return f"{plan_id}.body"


def child_key(index: int) -> str:
    return f"mail-{index + 1}"


def summarize(results: Sequence[Mapping[str, Any]], stopped: str | None = None) -> str:
    """``"3 of 5 confirmed; 1 rejected, 1 cancelled (failFast: ...)"``."""
    counts = Counter(str(r.get("outcome")) for r in results)
    head = f"{counts.get('confirmed', 0)} of {len(results)} confirmed"
    others = [f"{counts[o]} {o}" for o in OUTCOMES if o != "confirmed" and counts.get(o)]
    text = head + ("; " + ", ".join(others) if others else "")
    return f"{text} ({stopped})" if stopped else text


def final_status(results: Sequence[Mapping[str, Any]], cancelled: bool) -> TaskStatus:
    """The parent's terminal task status: a cancel request wins, then an unresolved send."""
    outcomes = {r.get("outcome") for r in results}
    if cancelled:
        return TaskStatus.CANCELLED
    if "uncertain" in outcomes:
        return TaskStatus.INTERRUPTED
    return TaskStatus.COMPLETED if outcomes <= {"confirmed"} else TaskStatus.FAILED


def error_result(error: KernelError | Mapping[str, Any]) -> dict[str, Any]:
    """The parent's answer to input it refused: nothing was planned or sent."""
    body = error.to_dict() if isinstance(error, KernelError) else dict(error)
    return {
        "ok": False,
        "kind": "invalid",
        "error": body,
        "results": [],
        "summary": f"nothing sent: {body.get('message')}",
    }
