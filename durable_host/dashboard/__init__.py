"""The dashboard: a page for any app at ``/admin/dashboard``, served by the host itself.

Plain HTML, CSS and JavaScript from ``static/`` (package data: no build step, nothing from
a CDN). It sits under ``/admin``, so ``http.auth.Gate`` already asks for the master key when
auth is on; a browser passes it once as ``?code=`` and the page keeps it in
``sessionStorage`` and sends it as ``x-functions-key`` on its own calls, removing it from
the address bar so it is not left in the history or shown on screen (docs/host.md). The
page is one answer (script and style inlined), so nothing else is fetched without the key.

The page reads through a small JSON API here and acts through the management API itself
(raise event, suspend, resume, terminate, rewind, purge), so its actions are exactly those
every other client has. The read API (bad parameters answer 400 with a message naming them):

* ``api/instances``: filtered by status, name (which the management API has not), creation
  time and id prefix; ``sort=newest`` (default) or ``oldest`` pages with ``offset`` over a
  bounded scan (``MAX_SORT_SCAN`` rows, ``complete`` says whether it read them all),
  ``sort=id`` pages with the store's own ``after`` token;
* ``api/counts``: instances per runtime status under the same filters (status aside);
* ``api/instances/{id}``: the status with its history, ``parentInstanceId`` and
  ``subOrchestrations`` (``listing.py`` says where each comes from);
* ``api/timers``: the app's timer triggers, their schedules, last and next occurrence;
* ``api/entities``: the entities of one entity function, with their state.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from durable_host.core import history, wire
from durable_host.core.records import InstanceRecord, Query, RuntimeStatus
from durable_host.dashboard import listing
from durable_host.engine.client import ClientError, DurableClient, status_payload
from durable_host.triggers import timer as timer_triggers

BASE = "/admin/dashboard"
PAGE_SIZE = 25
MAX_TOP = 200  # rows one answer may ask for (``top``)
MAX_SCAN_PAGES = 20  # a name filter scans at most this many store pages per answer
STATIC = ("index.html", "dashboard.js", "dashboard.css")  # package data, inlined in the page
STATUSES = tuple(s.value for s in RuntimeStatus)
MAX_SORT_SCAN = 2000  # rows a time-ordered list or the counts read at most per answer
SCAN_PAGE = 500  # rows per store page while scanning
MAX_CHILDREN = 100  # sub-orchestrations listed (with their status) for one instance


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
            if rest == "api/counts":
                return web.json_response(await self._counts(request))
            if rest == "api/timers":
                return web.json_response(await self._timers())
            if rest == "api/entities":
                return web.json_response(await self._entities(request))
        except ClientError as error:
            return _error(error.status, error.message)
        except ValueError as error:  # a parameter ``listing`` refused
            return _error(400, str(error))
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

    def _filters(self, request: web.Request, statuses: tuple[str, ...] = ()) -> Query:
        q = request.query
        return Query(
            created_from=_time(q.get("from")),
            created_to=_time(q.get("to")),
            statuses=statuses,
            prefix=q.get("prefix") or None,
            entities=False,
        )

    async def _scan(self, query: Query, name: str) -> tuple[list[InstanceRecord], bool]:
        """The rows ``query`` (and the name filter) matches, reading at most
        ``MAX_SORT_SCAN`` rows; True when that was all of them."""
        read, rows, token = 0, [], None
        while True:
            page = await self.client.store.query(
                dataclasses.replace(query, top=SCAN_PAGE, continuation=token)
            )
            read, token = read + len(page.records), page.continuation
            rows += [r for r in page.records if not name or r.name.lower() == name]
            if not token:
                return rows, True
            if read >= MAX_SORT_SCAN:
                return rows, False

    async def _counts(self, request: web.Request) -> dict[str, Any]:
        name = request.query.get("name", "").strip().lower()
        rows, complete = await self._scan(self._filters(request), name)
        return {
            "counts": listing.counts(rows, STATUSES),
            "total": len(rows),
            "complete": complete,
        }

    async def _instances(self, request: web.Request) -> dict[str, Any]:
        q = request.query
        statuses = tuple(s for s in q.get("status", "").split(",") if s)
        unknown = [s for s in statuses if s not in STATUSES]
        if unknown:
            raise ClientError(400, f"unknown status {', '.join(unknown)}")
        sort = listing.sort_order(q.get("sort"))
        if sort != "id":
            if q.get("after"):
                raise ClientError(400, f"after= pages the id order (sort=id), not sort={sort}")
            return await self._instances_by_time(request, statuses, sort)
        if q.get("offset"):
            raise ClientError(400, "offset= pages sort=newest or oldest; sort=id pages with after=")
        top = _top(q.get("top"))
        name = q.get("name", "").strip().lower()
        query = dataclasses.replace(
            self._filters(request, statuses), top=top, continuation=q.get("after") or None
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
        return {"instances": rows, "next": token, "sort": "id", "complete": True}

    async def _instances_by_time(
        self, request: web.Request, statuses: tuple[str, ...], sort: str
    ) -> dict[str, Any]:
        q = request.query
        top = _top(q.get("top"))
        offset = listing.page_number("offset", q.get("offset"))
        name = q.get("name", "").strip().lower()
        rows, complete = await self._scan(self._filters(request, statuses), name)
        rows = listing.ordered(rows, sort)
        end = offset + top
        parking = self.client.engine.parking
        return {
            "instances": [
                status_payload(r, False, parking.status(r.instance_id)) for r in rows[offset:end]
            ],
            "next": str(end) if end < len(rows) else None,
            "sort": sort,
            "complete": complete,
        }

    async def _instance(self, instance_id: str) -> web.Response:
        status = await self.client.status(instance_id, show_history=True, show_history_output=True)
        if status is None:
            return _error(404, f"No instance with ID '{instance_id}' found.")
        store = self.client.store
        record = await store.get_instance(instance_id)
        events = await store.get_history(instance_id) if record is not None else []
        parent = record.parent_instance_id if record is not None else None
        status["parentInstanceId"] = listing.parent_of(parent, events)
        children = listing.children(events)
        status["subOrchestrationCount"] = len(children)
        for child in children[:MAX_CHILDREN]:
            found = await store.get_instance(child["instanceId"])
            child["runtimeStatus"] = found.status if found is not None else None
        status["subOrchestrations"] = children[:MAX_CHILDREN]
        return web.json_response(status)

    async def _timers(self) -> dict[str, Any]:
        """Each timer function: its schedule (a ``%Setting%`` resolved), whether it is
        disabled, and its last and next occurrence as the host's timer triggers keep them."""
        index, environ = self.client.engine.index, timer_triggers.environ()
        now = datetime.now(UTC)
        specs = {s.name: s for s in timer_triggers.plan(index, environ, now)}
        upcoming = await timer_triggers.next_occurrences(
            list(specs.values()), self.client.store, now
        )
        rows = []
        for info in index.timers:
            spec = specs.get(info.name)
            text = str(info.trigger().get("schedule") or "")
            setting = text[1:-1] if len(text) > 2 and text[0] == text[-1] == "%" else None
            stored = timer_triggers.read_status(await self.client.store.get_schedule(info.name))
            rows.append(
                {
                    "name": info.name,
                    "schedule": environ.get(setting, "") if setting else text,
                    "setting": setting,
                    "disabled": bool(info.disabled),
                    "useMonitor": spec.use_monitor if spec else None,
                    "runOnStartup": spec.run_on_startup if spec else None,
                    "last": stored.get("Last"),
                    "next": upcoming.get(info.name),
                }
            )
        zone = environ.get("WEBSITE_TIME_ZONE") or "UTC"
        return {"timers": rows, "timeZone": zone, "now": history.format_time(now)}

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


def _top(raw: str | None) -> int:
    try:
        top = int(raw) if raw else PAGE_SIZE
    except ValueError as exc:
        raise ClientError(400, f"top={raw!r} is not a number") from exc
    if not 1 <= top <= MAX_TOP:
        raise ClientError(400, f"top={raw!r} is out of range: 1 to {MAX_TOP}")
    return top


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
