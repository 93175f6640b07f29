"""The bearer check of the test MCP servers (``mcp_http_server.py``, ``mcp_task_server.py``):
``serve(app, port)`` runs a Starlette app on 127.0.0.1 where every request must carry
``Authorization: Bearer <TEST_MCP_TOKEN>``, else 401."""

from __future__ import annotations

import os
from typing import Any

import uvicorn
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import PlainTextResponse


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):  # type: ignore[no-untyped-def]
        if request.headers.get("authorization") != f"Bearer {os.environ['TEST_MCP_TOKEN']}":
            return PlainTextResponse("unauthorized", status_code=401)
        return await call_next(request)


def serve(app: Any, port: int) -> None:
    app.add_middleware(Bearer)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
