"""Text that can be stored: the one rule for strings that enter the app. Pure.

A JSON string may spell a lone UTF-16 surrogate (``"\\ud800"``) and still be valid JSON; Python
decodes it into a ``str`` that cannot be encoded as UTF-8. Every store, hash and content
reference of the app works on UTF-8 bytes, so such a string would be accepted and fail later,
far from its cause. The API refuses it at the boundary (``require_unicode``, HTTP 400), and the
kernel refuses it in the requests it validates, so it never reaches a session.

``scrub`` is for text the app itself produces from something it caught (an exception's message,
a reason): it replaces lone surrogates with U+FFFD so that reporting a failure cannot fail too.
"""

from __future__ import annotations

import re

from kernel.common.errors import ValidationError

REPLACEMENT = "\ufffd"
# Paired surrogates never appear in a str decoded from JSON (the decoder joins them), so any
# code point in this range is a lone one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or None."""
    found = _SURROGATE.search(text)
    return found.start() if found else None


def require_unicode(value: object, field: str | None) -> object:
    """``value`` as given, unless it is a string holding a lone surrogate: ``invalid_unicode``."""
    if isinstance(value, str):
        at = lone_surrogate(value)
        if at is not None:
            raise ValidationError(
                "invalid_unicode",
                f"{field or 'the value'} holds a lone surrogate (U+{ord(value[at]):04X}) at "
                f"character {at}; send valid Unicode text",
                field,
            )
    return value


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (always encodable as UTF-8)."""
    return _SURROGATE.sub(REPLACEMENT, text)
