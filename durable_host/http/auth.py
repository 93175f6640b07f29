"""Who may call what: the Functions host's auth levels, enforced on every route.

``Gate`` answers, for one request, whether it may go on. With auth off every route is
open (the host binds only loopback then, as Core Tools does locally). With auth on:

* ``/admin/host/status`` is open (health probes) and tells only the state;
* every other ``/admin/...`` route needs the master key;
* ``/runtime/webhooks/durabletask/...`` needs the Durable system key
  (``durabletask_extension``) or the master key; a function key is refused;
* ``/durabletask/...`` (the ``rpcBaseUrl`` the SDK's client calls from inside functions)
  needs the per-process RPC secret as its first path segment - the host hands functions an
  ``rpcBaseUrl`` that carries it, because the SDK appends paths and queries to that URL and
  can carry no ``code=`` - or, like the webhooks, the system or master key;
* an app function: its binding's ``authLevel`` - ``anonymous`` (no key), ``function``
  (the master key, a host function key or one of the function's own keys), ``admin``
  (the master key).

A key comes in the ``x-functions-key`` header or, failing that, the ``code`` query
parameter. A refusal is 401 with a JSON body - also for a valid key of too low a level, as
the Functions host answers - changes nothing, and is logged in at most one line a minute
(the count, the route kind, the peer; never a key, a ``code=`` value or a path that holds
the RPC secret).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

from durable_host.functions.loader import FunctionInfo
from durable_host.http import keys as keys_mod
from durable_host.http.keys import Keys, KeySet

log = logging.getLogger("durable_host.http.auth")

KEY_HEADER = "x-functions-key"
STATUS_PATH = "/admin/host/status"
WEBHOOK_BASE = "/runtime/webhooks/durabletask"
RPC_BASE = "/durabletask"
LOG_EVERY = 60.0


def presented_key(request: web.Request) -> str:
    header = request.headers.get(KEY_HEADER)
    return header if header is not None else request.query.get("code", "")


def function_level(info: FunctionInfo) -> str:
    """``anonymous``, ``function`` or ``admin``; anything else counts as ``function``."""
    level = str(info.trigger().get("authLevel") or "function").lower()
    return level if level in ("anonymous", "admin") else "function"


def loggable(path: str) -> str:
    """A path fit for a log line: one under the RPC base may hold the RPC secret."""
    return RPC_BASE + "/..." if path.startswith(RPC_BASE + "/") else path


def unauthorized(message: str) -> web.Response:
    return web.json_response({"error": "unauthorized", "message": message}, status=401)


@dataclass
class RefusalLog:
    """One log line per ``LOG_EVERY`` seconds at most, however many requests are refused."""

    clock: Callable[[], float] = time.monotonic
    _last: float = field(default=-1e18)
    _held: int = 0

    def refused(self, request: web.Request, what: str, reason: str) -> None:
        self._held += 1
        now = self.clock()
        if now - self._last < LOG_EVERY:
            return
        log.warning(
            "refused %d request(s) without a valid key (one such line a minute at most);"
            " latest: %s %s from %s (%s)",
            self._held,
            request.method,
            what,
            request.remote,
            reason,
        )
        self._last, self._held = now, 0


class Gate:
    """See the module docstring. ``enabled`` False: every route is open."""

    def __init__(self, keys: Keys | None, enabled: bool) -> None:
        self.keys = keys
        self.enabled = enabled
        self.rpc_secret = secrets.token_urlsafe(32)
        self.refusals = RefusalLog()

    @property
    def rpc_segment(self) -> str | None:
        """The first path segment of ``rpcBaseUrl`` under ``/durabletask`` (None: auth off)."""
        return self.rpc_secret if self.enabled else None

    def link_code(self) -> str | None:
        """The ``code=`` of check-status links: the Durable system key (None: auth off)."""
        if not self.enabled or self.keys is None:
            return None
        return self.keys.cached().system_key() or None

    async def _keyset(self) -> KeySet:
        assert self.keys is not None
        return await self.keys.current()

    def _refuse(self, request: web.Request, what: str, key: str, message: str) -> web.Response:
        self.refusals.refused(request, what, "no key" if not key else "a key not valid here")
        return unauthorized(message)

    async def admit(self, request: web.Request) -> tuple[web.Response | None, str]:
        """For a host route: a refusal, or None and the path to route (the RPC secret
        removed). App function routes pass here and are checked by ``admit_function``."""
        path = request.path
        under_rpc = path == RPC_BASE or path.startswith(RPC_BASE + "/")
        if not self.enabled:
            return None, path
        if under_rpc:
            head, _, rest = path[len(RPC_BASE) + 1 :].partition("/")
            if keys_mod.matches(head, [self.rpc_secret]):
                return None, f"{RPC_BASE}/{rest}"
        key = presented_key(request)
        if path == STATUS_PATH:
            return None, path
        if path == "/admin" or path.startswith("/admin/"):
            if keys_mod.matches(key, [(await self._keyset()).master]):
                return None, path
            return self._refuse(
                request, "admin API", key, "The admin API needs the master key."
            ), path
        if under_rpc or path == WEBHOOK_BASE or path.startswith(WEBHOOK_BASE + "/"):
            if keys_mod.matches(key, (await self._keyset()).for_webhooks()):
                return None, path
            what = "management API"
            message = (
                "The management API needs the durabletask_extension system key or the master key."
            )
            return self._refuse(request, what, key, message), path
        return None, path

    async def admit_function(self, request: web.Request, info: FunctionInfo) -> web.Response | None:
        if not self.enabled:
            return None
        level = function_level(info)
        if level == "anonymous":
            return None
        key = presented_key(request)
        keys = await self._keyset()
        valid = [keys.master] if level == "admin" else keys.for_function(info.name)
        if keys_mod.matches(key, valid):
            return None
        need = "the master key" if level == "admin" else "a function key or the master key"
        message = f"The function '{info.name}' has auth level {level}: it needs {need}."
        return self._refuse(request, f"function {info.name}", key, message)


# --- where the host listens, and what that means for auth (pure) -----------------------


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything, so it is not loopback


def local_address(host: str) -> str:
    """Where this process reaches its own server: loopback when it binds every interface."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    return "::1" if host == "::" else host


def authority(host: str) -> str:
    """A host as it appears in a URL (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def decide(mode: str | None, host: str) -> tuple[bool, str]:
    """Whether keys are required, and the start-up line that says so and why."""
    if mode == "keys" or (mode is None and not is_loopback(host)):
        why = (
            "--auth keys" if mode == "keys" else f"the host listens beyond loopback ({host or '*'})"
        )
        return True, (
            f"auth: keys required ({why}): function keys for app functions, the master key for"
            " /admin, the durabletask_extension system key for the management API;"
            " `python -m durable_host keys` shows them"
        )
    if mode == "off" and not is_loopback(host):
        return False, (
            f"auth is OFF (--auth off) although the host listens on {host or '*'}: every route,"
            " the management API and /admin included, answers anyone who can reach it"
        )
    return False, (
        f"auth is off: the host listens only on loopback ({host}), where every route is open as"
        " under Core Tools; start it with --auth keys to require keys"
    )


def parse_public_url(text: str | None) -> str | None:
    """``--public-url``: an http(s) origin, optionally with a path prefix; no query."""
    if not text or not text.strip():
        return None
    parsed = urlsplit(text.strip())
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.netloc
        or parsed.query
        or parsed.fragment
    ):
        raise ValueError(
            f"the public URL {text!r} must be an http:// or https:// address with no query,"
            " e.g. https://durable.example.com"
        )
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"
