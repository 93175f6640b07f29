"""Large content by reference. Pure: hashing only; storing the content is the caller's job.

Contract:
* A text whose UTF-8 encoding is longer than ``REFERENCE_THRESHOLD_BYTES`` is never kept inline
  in session state or orchestration history: the caller stores it in the content store first
  and passes ``content_ref(text)`` instead.
* ``content_ref`` is ``sha256:<64 lowercase hex>`` of the UTF-8 bytes, so equal texts share one
  stored copy and a reader can verify what it fetched.

Why 4 KiB: entity state and history rows are re-read on every operation and replay; inline
texts above a few KiB dominate that cost, while most chat turns stay far below it.
"""

from __future__ import annotations

import hashlib
import re

from kernel.common.errors import ValidationError

REFERENCE_THRESHOLD_BYTES = 4096
CONTENT_REF_PATTERN = r"^sha256:[0-9a-f]{64}$"

_CONTENT_REF = re.compile(CONTENT_REF_PATTERN)


def content_ref(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def needs_reference(text: str) -> bool:
    # Cheap bound first: a str of n code points encodes to at most 4n bytes.
    if len(text) * 4 <= REFERENCE_THRESHOLD_BYTES:
        return False
    return len(text.encode("utf-8")) > REFERENCE_THRESHOLD_BYTES


def is_content_ref(value: object) -> bool:
    return isinstance(value, str) and _CONTENT_REF.match(value) is not None


def validate_content_ref(value: object, field: str | None = "content_ref") -> str:
    if not isinstance(value, str) or not is_content_ref(value):
        raise ValidationError("invalid_content_ref", "must be sha256:<64 lowercase hex>", field)
    return value


def validate_inline_text(value: str, field: str | None = "text") -> str:
    if needs_reference(value):
        raise ValidationError(
            "text_too_long",
            f"longer than {REFERENCE_THRESHOLD_BYTES} UTF-8 bytes: store it and pass its "
            "content_ref instead",
            field,
        )
    return value
