"""How every route of the app's HTTP API answers: a JSON body, and one error shape.

An error is ``{"error", "message", "field"}`` (``KernelError.to_dict``) with the status its
class names (``http_status``: 400 validation, 404 not found, 409 conflict, 410 expired), so a
route raises or builds a ``KernelError`` and answers it with ``failure``; it never writes an
error body by hand.
"""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func

from kernel.common.errors import KernelError


def reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body), status_code=status, mimetype="application/json", headers=headers
    )


def failure(exc: KernelError) -> func.HttpResponse:
    return reply(exc.to_dict(), exc.http_status)
