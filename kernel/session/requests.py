"""Request shapes of the session operations: the kernel's trust boundary. Pure.

Every operation parses its request with ``parse`` before it looks at the state, so a malformed
request fails with a ``ValidationError`` naming the field (``entries[2].role``) and no state is
touched. Models are strict (``"1"`` is not ``1``) and forbid unknown keys: a misspelt field is an
error, not a silently ignored one. State-dependent checks (versions, transitions, existence)
belong to the reducers, not here.

Limits (each has a test):
* accept ``text``: 1..``MAX_TEXT_CHARS`` characters, not only whitespace; above
  ``REFERENCE_THRESHOLD_BYTES`` UTF-8 bytes the caller stores it and passes ``text_ref``.
* entry ``text`` and submission ``answer``: inline only up to ``REFERENCE_THRESHOLD_BYTES``;
  longer content travels as ``content_ref``.
* entry ``data``: a JSON object of at most ``MAX_DATA_BYTES`` serialised.
* one commit: ``MAX_COMMIT_ENTRIES`` entries, ``MAX_COMMIT_DOCUMENTS`` documents,
  ``MAX_COMMIT_TASKS`` tasks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Literal, TypeVar

import pydantic
from pydantic import AfterValidator, ConfigDict, Field, JsonValue

from kernel.common import ids
from kernel.common.content import (
    content_ref,
    needs_reference,
    validate_content_ref,
    validate_inline_text,
)
from kernel.common.errors import ValidationError
from kernel.common.statuses import FinalStatusValue, TaskStatusValue, TierValue
from kernel.common.text import require_unicode
from kernel.session.documents import DOCUMENT_ID_PATTERN

Role = Literal["user", "assistant", "tool", "system"]

MAX_TEXT_CHARS = 32_000
MAX_DATA_BYTES = 16 * 1024
MAX_REASON_CHARS = 1_000
MAX_COMMIT_ENTRIES = 100
MAX_COMMIT_DOCUMENTS = 20
MAX_COMMIT_TASKS = 100
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
CONVERSATION_PATTERN = ids.SESSION_ID_PATTERN
PRINCIPAL_PATTERN = r"^[\x21-\x7e]{1,128}$"

M = TypeVar("M", bound=pydantic.BaseModel)


def _check(fn: Callable[[str, str | None], str]) -> AfterValidator:
    # Inside a model the location is pydantic's, so the kernel check reports no field of its own.
    return AfterValidator(lambda value: fn(value, None))


def _user_text(text: str) -> str:
    if not text.strip():
        raise ValidationError("empty_text", "text must not be empty or only whitespace")
    if len(text) > MAX_TEXT_CHARS:
        raise ValidationError("text_too_long", f"text exceeds {MAX_TEXT_CHARS} characters")
    # Before needs_reference below encodes it: a lone surrogate is refused, not a crash.
    require_unicode(text, None)
    return text


def _small_json(data: dict[str, JsonValue]) -> dict[str, JsonValue]:
    if len(json.dumps(data, separators=(",", ":"))) > MAX_DATA_BYTES:
        raise ValidationError("data_too_large", f"serialised data exceeds {MAX_DATA_BYTES} bytes")
    return data


InstanceId = Annotated[str, _check(ids.validate_instance_id)]
ContentRef = Annotated[str, _check(validate_content_ref)]
InlineText = Annotated[str, _check(validate_inline_text)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Reason = Annotated[str, Field(max_length=MAX_REASON_CHARS)]
SubmissionId = Annotated[str, _check(ids.validate_key)]


class _Request(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AcceptRequest(_Request):
    """``owner``, when present (even null), is the caller's principal: the session must be
    unowned or its own; a new session records it (``kernel.session.submissions.check_owner``)."""

    request_id: Annotated[str, _check(ids.validate_request_id)]
    text: Annotated[str, AfterValidator(_user_text)]
    text_ref: ContentRef | None = None
    submission_id: SubmissionId | None = None
    owner: Annotated[str, Field(pattern=PRINCIPAL_PATTERN)] | None = None

    @pydantic.model_validator(mode="after")
    def _ref_matches_text(self) -> AcceptRequest:
        # The reducer keeps only the ref of a long text, so the ref must be the text's own.
        if needs_reference(self.text) and self.text_ref is None:
            raise ValidationError(
                "text_ref_required", "a text this long must be stored first", "text_ref"
            )
        if self.text_ref is not None and self.text_ref != content_ref(self.text):
            raise ValidationError("text_ref_mismatch", "text_ref is not the text's", "text_ref")
        return self


class EntryIn(_Request):
    conversation: Annotated[str, Field(pattern=CONVERSATION_PATTERN)] = "main"
    role: Role
    kind: Name = "message"
    text: InlineText | None = None
    content_ref: ContentRef | None = None
    data: Annotated[dict[str, JsonValue], AfterValidator(_small_json)] | None = None

    @pydantic.model_validator(mode="after")
    def _one_body(self) -> EntryIn:
        if self.text is not None and self.content_ref is not None:
            raise ValidationError("ambiguous_body", "give text or content_ref, not both", "text")
        if self.text is None and self.content_ref is None and self.data is None:
            raise ValidationError("empty_entry", "give text, content_ref or data")
        return self


class DocumentChange(_Request):
    """A new version of a document, or with ``delete: true`` (and no ``data``) its tombstone."""

    id: Annotated[str, Field(pattern=DOCUMENT_ID_PATTERN)]
    type: str
    data: JsonValue = None
    expected_version: Annotated[int, Field(ge=0)] | None = None
    delete: bool = False

    @pydantic.model_validator(mode="after")
    def _data_or_delete(self) -> DocumentChange:
        given = "data" in self.model_fields_set
        if self.delete and given:
            raise ValidationError("ambiguous_body", "a delete carries no data", "data")
        if not self.delete and not given:
            raise ValidationError("missing_field", "data is required unless delete is true", "data")
        return self


class TaskPatch(_Request):
    """Fields absent from the request are left alone; ``children`` is derived from ``parent``."""

    id: InstanceId
    kind: Name | None = None
    version: Annotated[str, Field(max_length=64)] | None = None
    status: TaskStatusValue | None = None
    phase: Annotated[str, Field(max_length=64)] | None = None
    parent: InstanceId | None = None
    reason: Reason | None = None
    # How far a task under a failure policy got (``kernel.turn.failures``): ok, retried, handled,
    # needs_attention. Only such tasks carry one.
    tier: TierValue | None = None


class SubmissionPatch(_Request):
    id: SubmissionId | None = None
    status: FinalStatusValue | None = None
    answer: InlineText | None = None


class CommitRequest(_Request):
    submission_id: SubmissionId | None = None
    entries: Annotated[list[EntryIn], Field(max_length=MAX_COMMIT_ENTRIES)] = []
    documents: Annotated[list[DocumentChange], Field(max_length=MAX_COMMIT_DOCUMENTS)] = []
    tasks: Annotated[list[TaskPatch], Field(max_length=MAX_COMMIT_TASKS)] = []
    submission: SubmissionPatch | None = None

    @pydantic.model_validator(mode="after")
    def _coherent(self) -> CommitRequest:
        if not (self.entries or self.documents or self.tasks or self.submission):
            raise ValidationError("empty_commit", "a commit must change something")
        sub = self.submission
        if sub is not None and sub.id is None and self.submission_id is None:
            raise ValidationError("missing_submission_id", "which submission?", "submission.id")
        if (
            sub is not None
            and None not in (sub.id, self.submission_id)
            and (sub.id != self.submission_id)
        ):
            raise ValidationError(
                "submission_mismatch", "differs from submission_id", "submission.id"
            )
        doc_ids = [doc.id for doc in self.documents]
        if len(set(doc_ids)) != len(doc_ids):
            raise ValidationError("duplicate_document", "one change per document", "documents")
        return self

    def target_submission(self) -> str | None:
        """The submission this commit writes for, from either place it may be named."""
        if self.submission is not None and self.submission.id is not None:
            return self.submission.id
        return self.submission_id


class FinishRequest(_Request):
    submission_id: SubmissionId
    status: FinalStatusValue
    answer: InlineText | None = None


class CancelRequest(_Request):
    submission_id: SubmissionId
    reason: Reason | None = None


class ChangesRequest(_Request):
    after: int
    limit: Annotated[int, Field(ge=1)] | None = None


class SubmissionRequest(_Request):
    submission_id: SubmissionId


def parse(model: type[M], request: object) -> M:
    """Validate ``request`` (a JSON object) into ``model`` or raise ``ValidationError``."""
    if not isinstance(request, Mapping):
        raise ValidationError("invalid_request", "the request must be a JSON object")
    try:
        return model.model_validate(request)
    except pydantic.ValidationError as exc:
        raise ValidationError.from_pydantic(exc) from exc
