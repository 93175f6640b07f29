"""The legacy SSE transport across hosts: a message posted to one host for a stream another holds. IO.

The extension forwards such a message through an Azure Storage queue to the instance holding
the stream, which handles it and answers on the stream. The host does the same through the
task hub's store, with the compare-and-swap of host secrets that every store has
(``Store.get_secret``/``swap_secret``; on Azure a blob, in SQLite and PostgreSQL a row):

* each host has an inbox, the secret ``mcp-sse-inbox-<tag>``; ``tag`` is a random value per
  host process, and the client ids a host hands out on ``GET .../sse`` start with it
  (``<tag>-<random>``, signed as every session id: ``sessions``), so any host can tell from
  a verified ``azmcpcs`` which inbox a message goes to;
* the inbox is JSON ``{"seen": <epoch seconds>, "messages": [{"client", "message",
  "headers"}, ...]}``; a host posting a message appends it with compare-and-swap (``post``);
* a host holding streams reads its inbox every ``POLL`` seconds (``run``), takes the messages
  with one compare-and-swap and hands each to its stream as if posted to it; it refreshes
  ``seen`` at least every ``SEEN_EVERY`` seconds, so a poster can tell a live holder: an inbox
  not seen for ``STALE`` seconds (its host died), closed by its host as it stopped
  (``close``), or missing takes no message and the poster answers 400, as for an unknown
  stream, and the client reconnects;
* an inbox holds at most ``MAX_MESSAGES`` messages and ``MAX_BYTES`` of JSON: past that the
  poster answers 503 and nothing is written.

The headers stored are the request's, without ``x-functions-key`` (never kept in the store);
they wait in the hub's store only until the holder takes them. An inbox is left behind when its
host stops (one small secret per host process that held a legacy stream).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from durable_host.http.keys import SecretStore

log = logging.getLogger("durable_host.mcp")

PREFIX = "mcp-sse-inbox-"
POLL = 0.3
SEEN_EVERY = 10.0
STALE = 45.0
MAX_MESSAGES = 500
MAX_BYTES = 4 * 1024 * 1024
SWAP_TRIES = 20
_SECRET_HEADERS = ("x-functions-key",)

Deliver = Callable[[str, dict[str, Any], dict[str, str]], Awaitable[None]]


class InboxFull(Exception):
    """The holder's inbox is at its limit (the poster answers 503)."""


def new_tag() -> str:
    return secrets.token_hex(6)


def tag_of(client_id: str) -> str | None:
    """The holder's tag in a client id this transport issued, or None (an older id)."""
    tag, sep, _ = client_id.partition("-")
    return tag if sep and tag else None


class Relay:
    def __init__(self, store: SecretStore, tag: str, clock: Callable[[], float] = time.time):
        self.store, self.tag, self.clock = store, tag, clock
        self._seen = 0.0

    async def open(self) -> None:
        """Make (or refresh) this host's inbox, so posters see a live holder."""
        await self._swap(lambda inbox: inbox, self.tag, refresh=True)

    async def close(self) -> None:
        """This host holds no stream any more (it stops): posters answer 400 at once rather
        than after ``STALE`` seconds; messages still waiting are dropped with the streams."""
        await self._swap(lambda inbox: {"seen": 0, "messages": []}, self.tag, refresh=False)

    async def post(
        self, client_id: str, message: dict[str, Any], headers: Mapping[str, str]
    ) -> bool:
        """Append ``message`` to the holder's inbox: False when there is no live holder;
        ``InboxFull`` at the inbox's limit."""
        tag = tag_of(client_id)
        if tag is None or tag == self.tag:
            return False
        kept = {k: v for k, v in headers.items() if k.lower() not in _SECRET_HEADERS}
        entry = {"id": secrets.token_hex(8), "client": client_id, "message": message}
        entry["headers"] = kept
        now = self.clock()

        def add(inbox: dict[str, Any]) -> dict[str, Any] | None:
            if now - float(inbox.get("seen", 0)) > STALE:
                return None
            messages = list(inbox.get("messages", []))
            if any(m.get("id") == entry["id"] for m in messages):
                return inbox  # a retry after a write that applied but was not confirmed
            if len(messages) >= MAX_MESSAGES:
                raise InboxFull(f"{len(messages)} messages wait")
            messages.append(entry)
            out = {**inbox, "messages": messages}
            if len(json.dumps(out)) > MAX_BYTES:
                raise InboxFull("the waiting messages are too large")
            return out

        return await self._swap(add, tag, refresh=False, create=False)

    async def take(self) -> list[dict[str, Any]]:
        """The messages waiting in this host's inbox, taken (and ``seen`` refreshed when due)."""
        # Kept across the compare-and-swap's retries: a swap that applied but was reported
        # lost leaves the messages taken by it out of the next read, yet still ours.
        taken: dict[str, dict[str, Any]] = {}

        def drain(inbox: dict[str, Any]) -> dict[str, Any] | None:
            for m in inbox.get("messages", []):
                taken.setdefault(str(m.get("id")), m)
            return {**inbox, "messages": []}

        text = await self.store.get_secret(PREFIX + self.tag)
        due = self.clock() - self._seen >= SEEN_EVERY
        if text is not None and not due and not json.loads(text).get("messages"):
            return []  # nothing waits: a read, no write
        await self._swap(drain, self.tag, refresh=True)
        return list(taken.values())

    async def run(self, active: Callable[[], bool], deliver: Deliver) -> None:
        """Poll this host's inbox while ``active()``; each message to ``deliver``."""
        while active():
            try:
                for entry in await self.take():
                    await deliver(
                        str(entry.get("client", "")),
                        entry.get("message") or {},
                        dict(entry.get("headers") or {}),
                    )
            except asyncio.CancelledError:
                raise
            except Exception:  # a store hiccup: the next round tries again
                log.warning("MCP SSE inbox %s: read failed; retrying", self.tag, exc_info=True)
            await asyncio.sleep(POLL)

    async def _swap(
        self,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        tag: str,
        *,
        refresh: bool,
        create: bool = True,
    ) -> bool:
        """Apply ``change`` to inbox ``tag`` by compare-and-swap; False when ``change``
        declines (None) or the inbox does not exist and ``create`` is off."""
        name = PREFIX + tag
        for _ in range(SWAP_TRIES):
            text = await self.store.get_secret(name)
            if text is None and not create:
                return False
            inbox = json.loads(text) if text is not None else {"seen": 0, "messages": []}
            changed = change(inbox)
            if changed is None:
                return False
            now = self.clock()
            if refresh:
                changed = {**changed, "seen": now}
            if await self.store.swap_secret(name, text, json.dumps(changed)):
                if refresh:
                    self._seen = now
                return True
            await asyncio.sleep(0.01)
        raise InboxFull(f"the inbox {tag} is too busy")
