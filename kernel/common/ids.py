"""Identifiers: validation of client-chosen ids and derivation of every other id. Pure.

Contract:
* A session id matches ``SESSION_ID_PATTERN``; a request id is 1..128 printable characters.
* Every derived id is a pure function of its inputs, so a retry, a replay or a recovery
  computes the same id again and finds the work already there:

  ========================================  ===============================================
  ``submission_id(session, request)``       ``uuid5(NAMESPACE, "submission:{session}:{request}")``
  ``turn_instance_id(session, submission)`` ``{session}:turn:{submission}``
  ``tool_task_id(submission, round, call)`` ``{submission}:tool:{round}:{call}``
  ``child_task_id(parent, key)``            ``{parent}:{key}``, or ``{prefix}:~{hash}`` when
                                            that would exceed 256 characters
  ``session_entity_key(session)``           the session id itself (entity ``@session@{id}``)
  ========================================  ===============================================

* Every derived task id is a valid Durable instance id (``validate_instance_id``): at most 256
  characters, no ``/ \\ # ?`` or control characters, not starting with ``@``.
* Turn ids start with ``{session}:`` and child ids with their parent's id, so a status query
  by instance-id prefix lists a session's or a task's whole subtree. ``:`` never occurs in a
  session id or a key, which keeps the readable forms unambiguous.

``NAMESPACE`` is fixed forever: changing it changes every submission id, so a client retry
after an upgrade would create a second submission instead of finding the first.
"""

from __future__ import annotations

import re
import uuid

from kernel.common.errors import ValidationError

SESSION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
KEY_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
MAX_REQUEST_ID_CHARS = 128
MAX_INSTANCE_ID_CHARS = 256
SESSION_ENTITY_NAME = "session"
NAMESPACE = uuid.UUID("d982cdf9-712b-42ec-8230-888ce3154549")

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_KEY = re.compile(KEY_PATTERN)
_FORBIDDEN_IN_INSTANCE_ID = re.compile(r"[/\\#?\x00-\x1f\x7f]")
# A hashed child id keeps as much of its parent as fits next to ":~" and 32 hex digits.
_HASHED_PREFIX_CHARS = MAX_INSTANCE_ID_CHARS - 2 - 32


def validate_session_id(value: object, field: str | None = "session_id") -> str:
    if not isinstance(value, str) or not _SESSION_ID.match(value):
        raise ValidationError(
            "invalid_session_id", f"session id must match {SESSION_ID_PATTERN}", field
        )
    return value


def validate_request_id(value: object, field: str | None = "request_id") -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_REQUEST_ID_CHARS
        or not value.isprintable()
    ):
        raise ValidationError(
            "invalid_request_id",
            f"request id must be 1..{MAX_REQUEST_ID_CHARS} printable characters",
            field,
        )
    return value


def validate_key(value: object, field: str | None = "key") -> str:
    """A segment of a derived id (a submission id, a child key)."""
    if not isinstance(value, str) or not _KEY.match(value):
        raise ValidationError("invalid_key", f"key must match {KEY_PATTERN}", field)
    return value


def validate_instance_id(value: object, field: str | None = "instance_id") -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_INSTANCE_ID_CHARS
        or value.startswith("@")
        or _FORBIDDEN_IN_INSTANCE_ID.search(value)
    ):
        raise ValidationError(
            "invalid_instance_id",
            f"instance id must be 1..{MAX_INSTANCE_ID_CHARS} characters without / \\ # ? or "
            "control characters, not starting with @",
            field,
        )
    return value


def submission_id(session_id: str, request_id: str) -> str:
    validate_session_id(session_id)
    validate_request_id(request_id)
    return str(uuid.uuid5(NAMESPACE, f"submission:{session_id}:{request_id}"))


def turn_instance_id(session_id: str, submission_id: str) -> str:
    validate_session_id(session_id)
    validate_key(submission_id, "submission_id")
    return f"{session_id}:turn:{submission_id}"


def tool_task_id(submission_id: str, round_no: int, call_index: int) -> str:
    validate_key(submission_id, "submission_id")
    _check_index(round_no, "round_no")
    _check_index(call_index, "call_index")
    return f"{submission_id}:tool:{round_no}:{call_index}"


def child_task_id(parent_id: str, key: str) -> str:
    validate_instance_id(parent_id, "parent_id")
    validate_key(key)
    readable = f"{parent_id}:{key}"
    if len(readable) <= MAX_INSTANCE_ID_CHARS:
        return readable
    # "~" occurs in no key, so a hashed id never equals a readable one.
    digest = uuid.uuid5(NAMESPACE, f"child:{parent_id}:{key}").hex
    return f"{parent_id[:_HASHED_PREFIX_CHARS]}:~{digest}"


def session_entity_key(session_id: str) -> str:
    return validate_session_id(session_id)


def _check_index(value: object, field: str) -> None:
    # bool is an int subclass; True as a round number is a caller bug.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValidationError("invalid_index", "must be an integer >= 0", field)
