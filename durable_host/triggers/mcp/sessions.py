"""MCP session ids any host of the task hub accepts: ``<id>.<HMAC of the id>``.

The extension serves Streamable HTTP statelessly: ``initialize`` hands out an
``Mcp-Session-Id`` that carries the client's id (encrypted), and every later request is
served by whichever instance it reaches, which only checks that header. The host does the
same with a signature instead of encryption (the id is a random value, nothing to hide): the
key is one random secret kept with the hub's state (``Store.get_secret``/``swap_secret``,
name ``mcp-session-key``), created once by the first host that needs it, so every host of the
hub - and a restarted one - accepts the ids the others issued. A header that does not verify
is answered 400 ``Invalid client state.``, as the extension answers it.

The legacy SSE transport's ``azmcpcs`` query value is such a token too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid

from durable_host.http.keys import SecretStore

SECRET_NAME = "mcp-session-key"
MAX_TOKEN = 200


class Sessions:
    def __init__(self, store: SecretStore) -> None:
        self.store = store
        self._key: bytes | None = None

    async def load(self) -> None:
        text = await self.store.get_secret(SECRET_NAME)
        if text is None:
            fresh = secrets.token_urlsafe(32)
            if not await self.store.swap_secret(SECRET_NAME, None, fresh):
                text = await self.store.get_secret(SECRET_NAME)  # another host made it first
            text = text or fresh
        self._key = text.encode()

    def _mac(self, session_id: str) -> str:
        assert self._key is not None, "Sessions.load() has not run"
        digest = hmac.new(self._key, session_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")

    def issue(self, prefix: str = "") -> tuple[str, str]:
        """A new session: its id (``prefix`` then a random value) and the token a client
        sends back."""
        session_id = prefix + uuid.uuid4().hex
        return session_id, f"{session_id}.{self._mac(session_id)}"

    def verify(self, token: str) -> str | None:
        """The session id of a token this hub issued, or None."""
        if not token or len(token) > MAX_TOKEN:
            return None
        session_id, _, mac = token.partition(".")
        if not session_id or not hmac.compare_digest(mac.encode(), self._mac(session_id).encode()):
            return None
        return session_id
