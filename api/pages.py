"""Files the app serves as they are: the live session page, its script, the OpenAPI document.

``GET /api/sessions/{sessionId}/page`` is plain HTML (no build step, nothing from a CDN); its
script (``GET /api/static/session.js``) reads the session id from the page's own path and
follows the session through the JSON API alone: it reads the view, follows
``changes?after=&wait=&previews=`` from the view's cursor, re-reads the view whenever records
arrive (or from scratch when the cursor expired), and shows the answers' previews (streamed
model text, tool progress) after the entries, marked as previews, until their entries land. A tool call's entries fold into one card, and
the status line says ``live`` as soon as the change stream answers (docs/api.md).
``GET /api/openapi.yaml`` is
docs/openapi.yaml (a deployment must include that file; .funcignore decides). Only the files
named in ``STATIC`` are served.

Auth: the page is a ``function``-level route like the JSON API it reads, so a browser opens it
as ``.../page?code=<function key>`` and its script passes the key on (``x-functions-key``); a
session owned by another principal answers 404 here too (``api/principals.py``). The script,
the stylesheet and the OpenAPI document hold nothing about any session and are anonymous.
"""

from __future__ import annotations

from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

from api import inputs, principals
from api.replies import failure
from entities import session_pages
from kernel.common.errors import KernelError, NotFoundError

bp = df.Blueprint()
HERE = Path(__file__).resolve().parent
OPENAPI = HERE.parent / "docs" / "openapi.yaml"
STATIC = {
    "session.js": "text/javascript",
    "session.css": "text/css",
    "workspace.js": "text/javascript",  # the files panel (docs/workspace.md)
    "workspace.css": "text/css",
}


def file_response(path: Path, mimetype: str) -> func.HttpResponse:
    return func.HttpResponse(
        path.read_bytes(),
        status_code=200,
        mimetype=mimetype,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


@bp.route(route="sessions/{sessionId}/page", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@bp.durable_client_input(client_name="client")
async def session_page(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    try:
        session_id = inputs.session_id(req.route_params.get("sessionId"))
        who = principals.caller(req)
        if who.trusted:
            principals.check(who, await session_pages.read_head(client, session_id), session_id)
    except KernelError as exc:
        return failure(exc)
    return file_response(HERE / "static" / "session.html", "text/html")


@bp.route(route="static/{name}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def static_file(req: func.HttpRequest) -> func.HttpResponse:
    name = req.route_params.get("name", "")
    if name not in STATIC:
        return failure(NotFoundError("file_not_found", f"no file {name!r}", "name"))
    return file_response(HERE / "static" / name, STATIC[name])


@bp.route(route="openapi.yaml", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def openapi(req: func.HttpRequest) -> func.HttpResponse:
    if not OPENAPI.is_file():  # a deployment package that leaves docs/ out
        return failure(NotFoundError("file_not_found", "openapi.yaml is not deployed", None))
    return file_response(OPENAPI, "application/yaml")
