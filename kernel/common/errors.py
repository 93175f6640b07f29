"""Errors of the pure kernel. Pure: no IO.

Catch ``KernelError`` to handle any of them::

    KernelError                   root: carries ``code``, ``message``, ``field``
    ├── ValidationError           the request is malformed                      HTTP 400
    │   └── CursorExpiredError    a change cursor fell off the bounded log      HTTP 410
    ├── NotFoundError             the request names something that is absent   HTTP 404
    ├── ConflictError             well formed, but clashes with the state      HTTP 409
    ├── PermanentError            an activity failure that retrying cannot fix
    └── TransientError            an activity failure worth retrying

Contract:
* ``code`` is a stable snake_case string that clients may switch on; ``message`` is for people;
  ``field`` names the offending request field as a path (``entries[2].role``,
  ``documents[0].data.recipients[1]``) or is ``None``.
* ``to_dict()`` is the JSON error body ``{"error": code, "message": ..., "field": ...}`` and
  ``http_status`` the status an HTTP front sends with it.
* A kernel reducer that raises has changed nothing (see ``kernel.session.reducer``).
* ``ValidationError`` is also a ``ValueError`` so pydantic validators can call the kernel's own
  checks and report them at the right location (see ``from_pydantic``).
* Durable Functions flattens exception types across the activity boundary, so activities turn
  ``PermanentError`` / ``TransientError`` into returned envelopes; ``retryable`` says which.
"""

from __future__ import annotations

import re
from typing import Any

import pydantic

_CODE = re.compile(r"^[a-z][a-z0-9_]*$")


class KernelError(Exception):
    """Root of every error the kernel raises on purpose."""

    http_status: int = 500
    retryable: bool = False

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        if not _CODE.match(code):
            raise ValueError(f"error code must be snake_case: {code!r}")
        where = f" ({field})" if field else ""
        super().__init__(f"{code}{where}: {message}")
        self.code = code
        self.message = message
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling replays Exception.args, which is not our __init__ signature.
        return (type(self), (self.code, self.message, self.field))

    def to_dict(self) -> dict[str, str | None]:
        return {"error": self.code, "message": self.message, "field": self.field}


class ValidationError(KernelError, ValueError):
    """The request is malformed; nothing was changed."""

    http_status = 400

    @classmethod
    def from_pydantic(
        cls, exc: pydantic.ValidationError, *, code: str = "invalid_request", at: str = ""
    ) -> ValidationError:
        """Translate pydantic's first error, keeping the path of the failing field.

        A kernel check raised inside a validator keeps its own code; its ``field`` is taken
        as relative to the location pydantic reports (``None`` means "this value").
        """
        errors = exc.errors(include_url=False)
        first = errors[0]
        field = join_path(at, *first["loc"])
        cause = (first.get("ctx") or {}).get("error")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        if isinstance(cause, KernelError):
            return cls(cause.code, cause.message + more, join_path(field, cause.field))
        message = str(cause) if isinstance(cause, Exception) else first["msg"]
        return cls(code, message + more, field)


class CursorExpiredError(ValidationError):
    """The reader's cursor is older than the retained change log: re-read the view."""

    http_status = 410


class NotFoundError(KernelError):
    """The request names a submission, task or document the session does not hold."""

    http_status = 404


class ConflictError(KernelError):
    """The request is well formed but clashes with the current state (version, status)."""

    http_status = 409


class PermanentError(KernelError):
    """An activity failed in a way a retry cannot fix."""


class TransientError(KernelError):
    """An activity failed in a way a later retry may fix."""

    http_status = 503
    retryable = True


def join_path(base: str | None, *parts: int | str | None) -> str | None:
    """``join_path("entries", 2, "role") == "entries[2].role"``; ``None`` parts are skipped."""
    path = base or ""
    for part in parts:
        if part is None or part == "":
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif path and not part.startswith("["):
            path += f".{part}"
        else:
            path += part
    return path or None
