"""The dashboard: a page for any app at ``/admin/dashboard``, served by the host itself.

Plain HTML, CSS and JavaScript from ``static/`` (package data: no build step, nothing from
a CDN). It sits under ``/admin``, so ``http.auth.Gate`` already asks for the master key when
auth is on; a browser passes it once as ``?code=`` and the page keeps it in
``sessionStorage`` and sends it as ``x-functions-key`` on its own calls, removing it from
the address bar so it is not left in the history or shown on screen (docs/host.md). The
page is one answer (script and style inlined), so nothing else is fetched without the key.

The page reads through a small JSON API here (instances with a name filter, which the
management API has not; one instance with its history; entities with their state) and
acts through the management API itself (raise event, suspend, resume, terminate, rewind,
purge), so its actions are exactly those every other client has.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from durable_host import history, wire
from durable_host.client import ClientError, DurableClient
from durable_host.records import Query, RuntimeStatus

BASE = "/admin/dashboard"
PAGE_SIZE = 25
MAX_TOP = 200  # rows one answer may ask for (``top``)
MAX_SCAN_PAGES = 20  # a name filter scans at most this many store pages per answer
STATIC = ("index.html", "dashboard.js", "dashboard.css")  # package data, inlined in the page
STATUSES = tuple(s.value for s in RuntimeStatus)


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class Dashboard:
    def __init__(self, client: DurableClient, hub: str) -> None:
        self.client = client
        self.hub = hub

    @staticmethod
    def owns(path: str) -> bool:
        return path == BASE or path.startswith(BASE + "/")

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        rest = path[len(BASE) :].strip("/")
        try:
            if request.method != "GET":
                return _error(
                    405, "The dashboard's API only reads; actions use the management API."
                )
            if rest in ("", "index.html"):
                return self._page()
            if rest == "api/app":
                return web.json_response(self._app())
            if rest == "api/instances":
                return web.json_response(await self._instances(request))
            if rest.startswith("api/instances/"):
                return await self._instance(rest.removeprefix("api/instances/"))
            if rest == "api/entities":
                return web.json_response(await self._entities(request))
        except ClientError as error:
            return _error(error.status, error.message)
        return _error(404, f"No dashboard route {path}")

    def _page(self) -> web.Response:
        """The page with its script and style inlined under a per-answer nonce: a browser
        that opened ``?code=`` fetches nothing more without the key, and the policy still
        lets no other script run."""
        nonce = secrets.token_urlsafe(16)
        html = _static("index.html").decode()
        html = html.replace(
            '<link rel="stylesheet" href="/admin/dashboard/static/dashboard.css">',
            f'<style nonce="{nonce}">\n{_static("dashboard.css").decode()}</style>',
        ).replace(
            '<script src="/admin/dashboard/static/dashboard.js"></script>',
            f'<script nonce="{nonce}">\n{_static("dashboard.js").decode()}</script>',
        )
        headers = {
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": (
                f"default-src 'self'; img-src 'self' data:; style-src 'self' 'nonce-{nonce}';"
                f" script-src 'nonce-{nonce}'; frame-ancestors 'none'"
            ),
        }
        return web.Response(text=html, content_type="text/html", headers=headers)

    def _app(self) -> dict[str, Any]:
        index = self.client.engine.index
        return {
            "hub": self.hub,
            "orchestrators": sorted(f.name for f in index.orchestrators.values()),
            "activities": sorted(f.name for f in index.activities.values()),
            "entities": sorted(index.entities),
            "http": sorted(f.name for f in index.http),
            "statuses": list(STATUSES),
        }

    async def _instances(self, request: web.Request) -> dict[str, Any]:
        q = request.query
        statuses = tuple(s for s in q.get("status", "").split(",") if s)
        unknown = [s for s in statuses if s not in STATUSES]
        if unknown:
            raise ClientError(400, f"unknown status {', '.join(unknown)}")
        raw = q.get("top")
        try:
            top = int(raw) if raw else PAGE_SIZE
        except ValueError as exc:
            raise ClientError(400, f"top={raw!r} is not a number") from exc
        if not 1 <= top <= MAX_TOP:
            raise ClientError(400, f"top={raw!r} is out of range: 1 to {MAX_TOP}")
        name = q.get("name", "").strip().lower()
        query = Query(
            created_from=_time(q.get("from")),
            created_to=_time(q.get("to")),
            statuses=statuses,
            prefix=q.get("prefix") or None,
            top=top,
            continuation=q.get("after") or None,
            entities=False,
        )
        rows: list[dict[str, Any]] = []
        token = query.continuation
        for _ in range(MAX_SCAN_PAGES):
            page, token = await self.client.query(
                dataclasses.replace(query, continuation=token), show_input=False
            )
            rows += [r for r in page if not name or r["name"].lower() == name]
            if not token or len(rows) >= top or not name:
                break
        return {"instances": rows, "next": token}

    async def _instance(self, instance_id: str) -> web.Response:
        status = await self.client.status(instance_id, show_history=True, show_history_output=True)
        if status is None:
            return _error(404, f"No instance with ID '{instance_id}' found.")
        return web.json_response(status)

    async def _entities(self, request: web.Request) -> dict[str, Any]:
        name = request.query.get("name", "")
        if self.client.engine.index.entity(name) is None:
            raise ClientError(404, f"No entity function named '{name}' is defined by this app.")
        page = await self.client.query_entities(
            name,
            Query(
                top=PAGE_SIZE * 4,
                continuation=request.query.get("after") or None,
                entities=True,
            ),
        )
        rows = [
            {
                "key": wire.split_entity_id(r.instance_id)[1],
                "state": wire.parse_stored(r.entity_state),
                "lastOperationTime": r.updated_at[:19] + "Z",
            }
            for r in page.records
            if r.entity_exists
        ]
        return {"entities": rows, "next": page.continuation}


def _time(text: str | None) -> str | None:
    """A ``datetime-local`` value (or ISO time) from the page, as the store compares times."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ClientError(400, f"{text!r} is not a date and time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return history.format_time(moment)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": "dashboard", "message": message}, status=status)
