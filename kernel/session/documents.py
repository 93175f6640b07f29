"""Typed, versioned session documents. Pure.

A document is ``{type, version, data, updated_at}`` under an id in ``state["documents"]``;
every change also appends ``{id, version, cursor, op}`` to ``state["document_history"]``
(``op``: create | update | delete; old rows are sealed into pages, ``kernel.session.pages``).

Contract:
* ``DOCUMENT_TYPES`` maps a type name to the pydantic model its ``data`` must satisfy. Models
  are strict (no coercion) and forbid unknown fields, so a typo is an error, not lost data.
* ``validate_document(type, data)`` returns the normalised data or raises ``ValidationError``
  whose ``field`` is the path of the failing value (``data.recipients[1]``).
* ``put_document`` applies one change: version 1 on create, +1 on every update. With
  ``expected_version`` the change applies only if it equals the current version (0 = "must not
  exist yet"), else ``ConflictError("version_conflict")``. A document never changes type.
* ``delete_document`` writes a **tombstone**: the next version, ``{type, version, data: null,
  deleted: true, updated_at}``. Deleting an absent or deleted document is
  ``NotFoundError("document_not_found")``. A later write creates the document again (op
  ``create``) at the next version, so versions never repeat and ``expected_version`` keeps
  working across a delete.

Types:
* ``note``         ``{title, text}``
* ``notice_plan``  ``{recipients, subject, body_ref, policy, receipts, summary}``: 1..50 distinct
  addresses (compared case-insensitively, since mail systems treat them so and a notice must
  not reach one person twice); ``body_ref`` is a content ref or a document id;
  ``policy`` is ``allSettled`` or ``failFast``; ``receipts`` maps a recipient to its receipt;
  ``summary`` (optional, at most 1,000 characters) is the outcome once the run has settled.
* ``json``         any JSON value.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, ConfigDict, Field, JsonValue

from kernel.common.content import CONTENT_REF_PATTERN
from kernel.common.errors import ConflictError, NotFoundError, ValidationError

DOCUMENT_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
MAX_DOCUMENT_BYTES = 64 * 1024
MAX_RECIPIENTS = 50

_EMAIL = re.compile(
    r"^[^@\s,;<>()\[\]\"]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$"
)


def _email(value: str) -> str:
    if len(value) > 254 or not _EMAIL.match(value):
        raise ValueError(f"not a valid email address: {value!r}")
    return value


Email = Annotated[str, AfterValidator(_email)]
ShortText = Annotated[str, Field(min_length=1, max_length=200)]


class _Document(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Note(_Document):
    title: ShortText
    text: Annotated[str, Field(max_length=32_000)]


class NoticePlan(_Document):
    recipients: Annotated[list[Email], Field(min_length=1, max_length=MAX_RECIPIENTS)]
    subject: ShortText
    body_ref: Annotated[str, Field(pattern=f"{CONTENT_REF_PATTERN}|{DOCUMENT_ID_PATTERN}")]
    policy: Literal["allSettled", "failFast"] = "allSettled"
    receipts: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    summary: Annotated[str, Field(max_length=1000)] | None = None

    @pydantic.field_validator("recipients")
    @classmethod
    def _distinct(cls, recipients: list[str]) -> list[str]:
        seen: set[str] = set()
        for index, address in enumerate(recipients):
            if address.casefold() in seen:
                raise ValidationError(
                    "duplicate_recipient", f"recipient listed twice: {address!r}", f"[{index}]"
                )
            seen.add(address.casefold())
        return recipients

    @pydantic.field_validator("receipts")
    @classmethod
    def _known_recipients(
        cls, receipts: dict[str, Any], info: pydantic.ValidationInfo
    ) -> dict[str, Any]:
        recipients = info.data.get("recipients")
        if recipients is None:  # already reported as invalid
            return receipts
        for address in receipts:
            if address not in recipients:
                raise ValueError(f"receipt for an address not in recipients: {address!r}")
        return receipts


JsonDocument = pydantic.RootModel[JsonValue]

DOCUMENT_TYPES: dict[str, type[pydantic.BaseModel]] = {
    "note": Note,
    "notice_plan": NoticePlan,
    "json": JsonDocument,
}


def validate_document(doc_type: str, data: object, *, at: str = "data") -> Any:
    """Return ``data`` normalised by its type's model, or raise naming the failing field."""
    model = DOCUMENT_TYPES.get(doc_type)
    if model is None:
        known = ", ".join(sorted(DOCUMENT_TYPES))
        raise ValidationError("unknown_document_type", f"known types: {known}", _sibling(at))
    try:
        normalised = model.model_validate(data).model_dump(mode="json")
    except pydantic.ValidationError as exc:
        raise ValidationError.from_pydantic(exc, code="invalid_document", at=at) from exc
    if len(json.dumps(normalised, separators=(",", ":"))) > MAX_DOCUMENT_BYTES:
        raise ValidationError(
            "document_too_large", f"serialised data exceeds {MAX_DOCUMENT_BYTES} bytes", at
        )
    return normalised


def put_document(
    state: dict[str, Any],
    *,
    doc_id: str,
    doc_type: str,
    data: object,
    expected_version: int | None,
    at: str,
    field: str,
) -> dict[str, Any]:
    """Create or update one document in ``state`` (a working copy); return its change item."""
    normalised = validate_document(doc_type, data, at=f"{field}.data")
    current = _check(state, doc_id, doc_type, expected_version, field)
    version = 0 if current is None else current["version"]
    record = {"type": doc_type, "version": version + 1, "data": normalised, "updated_at": at}
    live = current is not None and not current.get("deleted")
    return _write(state, doc_id, record, "update" if live else "create")


def delete_document(
    state: dict[str, Any], *, doc_id: str, doc_type: str, expected_version: int | None,
    at: str, field: str,
) -> dict[str, Any]:  # fmt: skip
    """Replace a live document with its tombstone in ``state`` (a working copy)."""
    current = _check(state, doc_id, doc_type, expected_version, field)
    if current is None or current.get("deleted"):
        raise NotFoundError("document_not_found", f"no document {doc_id!r}", f"{field}.id")
    record = {
        "type": doc_type, "version": current["version"] + 1, "data": None, "deleted": True,
        "updated_at": at,
    }  # fmt: skip
    return _write(state, doc_id, record, "delete")


def _check(
    state: dict[str, Any], doc_id: str, doc_type: str, expected_version: int | None, field: str
) -> dict[str, Any] | None:
    if doc_type not in DOCUMENT_TYPES:
        known = ", ".join(sorted(DOCUMENT_TYPES))
        raise ValidationError("unknown_document_type", f"known types: {known}", f"{field}.type")
    current: dict[str, Any] | None = state["documents"].get(doc_id)
    version = 0 if current is None else current["version"]
    if current is not None and current["type"] != doc_type:
        raise ConflictError(
            "document_type_mismatch",
            f"document {doc_id!r} is a {current['type']!r}; its type cannot change",
            f"{field}.type",
        )
    if expected_version is not None and expected_version != version:
        raise ConflictError(
            "version_conflict",
            f"document {doc_id!r} is at version {version}, not {expected_version}",
            f"{field}.expected_version",
        )
    return current


def _write(state: dict[str, Any], doc_id: str, record: dict[str, Any], op: str) -> dict[str, Any]:
    state["documents"][doc_id] = record
    # Live documents, counted here because older ones may sit in sealed pages (kernel.session.pages).
    counts = state.setdefault("counts", {})
    counts["documents"] = counts.get("documents", 0) + {"create": 1, "delete": -1}.get(op, 0)
    # Mutating operations bump the cursor by exactly one (kernel.session.changes).
    row = {"id": doc_id, "version": record["version"], "cursor": state["cursor"] + 1, "op": op}
    state["document_history"].append(row)
    item = {"type": "document", "id": doc_id, "doc_type": record["type"], "version": row["version"]}
    if op == "delete":
        item["deleted"] = True
    return item


def _sibling(path: str) -> str:
    # "documents[0].data" -> "documents[0].type": the type sits next to the data it governs.
    head, _, _ = path.rpartition(".")
    return f"{head}.type" if head else "type"
