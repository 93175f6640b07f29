"""The host's keys, as the Functions host has them: master, function and system keys.

* The **master key** (``_master``) is valid everywhere, and the only key of admin routes.
* **Host function keys** (``default`` and any added) are valid for every function of level
  ``function``; **per-function keys** only for their function.
* **System keys**; ``durabletask_extension`` opens the Durable management webhooks (and is
  the ``code=`` of every check-status link).

Where they come from: ``DURABLE_HOST_MASTER_KEY`` and ``DURABLE_HOST_FUNCTION_KEY`` (the
environment, or ``local.settings.json`` Values) fix the master key and the ``default``
function key; every other key is generated once (``secrets.token_urlsafe``) and kept with
the hub's state as one JSON document (``Store.get_secret``/``swap_secret``, name
``host-keys``), so a restarted or standby host and the ``keys`` command see the same keys.
A key fixed by a setting is never written to the store and cannot be changed through the
admin API (change the setting).

Every change is a compare-and-swap of the whole document, retried on conflict, so two
hosts rotating keys at once both take effect or one of them is told. ``Keys.current()``
re-reads the document at most every ``REFRESH_SECONDS``, so a key revoked on one host stops
working on the others within that time.

Contract: nothing here logs or formats a key value; ``matches`` compares in constant time.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

MASTER = "_master"
DEFAULT = "default"
DURABLE_SYSTEM_KEY = "durabletask_extension"
SECRET_NAME = "host-keys"
MASTER_SETTING = "DURABLE_HOST_MASTER_KEY"
FUNCTION_SETTING = "DURABLE_HOST_FUNCTION_KEY"
REFRESH_SECONDS = 10.0
MAX_KEYS = 50  # per scope: keeps the document (and the work of one check) small
KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
KEY_VALUE = re.compile(r"^[A-Za-z0-9._~=-]{32,256}$")
MAX_PRESENTED = 256  # longer presented keys are refused without comparing


class KeyConfigError(Exception):
    """A key setting is unusable (the host does not start with it)."""


class KeyChangeError(Exception):
    """A key change the admin API refuses; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class SecretStore(Protocol):
    async def get_secret(self, name: str) -> str | None: ...

    async def swap_secret(self, name: str, expected: str | None, value: str) -> bool: ...


def generate() -> str:
    return secrets.token_urlsafe(32)


def matches(presented: str, candidates: Iterable[str]) -> bool:
    """Whether ``presented`` equals one of ``candidates``, compared in constant time.

    Bytes, not str: ``compare_digest`` refuses non-ASCII text, and a presented key is
    whatever a client sent. Every candidate is compared (no early exit)."""
    if not presented or len(presented) > MAX_PRESENTED:
        return False
    given = presented.encode("utf-8", errors="replace")
    found = False
    for candidate in candidates:
        found |= hmac.compare_digest(given, candidate.encode())
    return found


@dataclass(frozen=True)
class KeySet:
    """One consistent set of keys. ``functions`` maps a lower-cased function name to its keys."""

    master: str
    host: Mapping[str, str] = field(default_factory=dict)
    system: Mapping[str, str] = field(default_factory=dict)
    functions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def fresh(cls) -> KeySet:
        return cls(generate(), {DEFAULT: generate()}, {DURABLE_SYSTEM_KEY: generate()}, {})

    def to_json(self) -> str:
        return json.dumps(
            {
                "master": self.master,
                "host": dict(self.host),
                "system": dict(self.system),
                "functions": {k: dict(v) for k, v in self.functions.items()},
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> KeySet:
        data = json.loads(text)
        return cls(
            str(data["master"]),
            dict(data.get("host") or {}),
            dict(data.get("system") or {}),
            {k: dict(v) for k, v in (data.get("functions") or {}).items()},
        )

    def system_key(self) -> str:
        return self.system.get(DURABLE_SYSTEM_KEY, "")

    def for_function(self, function: str) -> list[str]:
        """Keys valid for an HTTP function of level ``function``."""
        return [
            self.master,
            *self.host.values(),
            *self.functions.get(function.lower(), {}).values(),
        ]

    def for_webhooks(self) -> list[str]:
        """Keys valid for the Durable management webhooks: the system key and the master key."""
        return [self.master, *([self.system_key()] if self.system_key() else [])]


def _scope(keys: KeySet, scope: str, function: str | None) -> Mapping[str, str]:
    if scope == "host":
        return keys.host
    if scope == "system":
        return keys.system
    return keys.functions.get((function or "").lower(), {})


def _with_scope(keys: KeySet, scope: str, function: str | None, values: dict[str, str]) -> KeySet:
    if scope == "host":
        return replace(keys, host=values)
    if scope == "system":
        return replace(keys, system=values)
    functions = dict(keys.functions)
    if values:
        functions[(function or "").lower()] = values
    else:
        functions.pop((function or "").lower(), None)
    return replace(keys, functions=functions)


def check_value(value: str, what: str) -> str:
    if not KEY_VALUE.match(value):
        raise KeyChangeError(
            400, f"{what} must be 32-256 characters of letters, digits and . _ ~ = -"
        )
    return value


class Keys:
    """The live key ring of one host (or of the ``keys`` command): see the module docstring."""

    def __init__(
        self,
        store: SecretStore,
        settings: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.clock = clock
        self.fixed: dict[str, str] = {}  # key name -> the setting that fixes it
        self._master = self._setting(settings, MASTER_SETTING, MASTER)
        self._function = self._setting(settings, FUNCTION_SETTING, f"host/{DEFAULT}")
        self._stored: KeySet | None = None
        self._read_at = -1e18
        self._lock = asyncio.Lock()

    def _setting(self, settings: Mapping[str, str], name: str, key: str) -> str | None:
        value = (settings.get(name) or "").strip()
        if not value:
            return None
        if not KEY_VALUE.match(value):
            raise KeyConfigError(
                f"{name} must be 32-256 characters of letters, digits and . _ ~ = -"
                " (generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        self.fixed[key] = name
        return value

    def _effective(self, stored: KeySet) -> KeySet:
        keys = stored
        if self._master is not None:
            keys = replace(keys, master=self._master)
        if self._function is not None:
            keys = replace(keys, host={**keys.host, DEFAULT: self._function})
        return keys

    async def load(self) -> KeySet:
        """Read the stored keys, creating them once if the hub has none."""
        async with self._lock:
            text = await self.store.get_secret(SECRET_NAME)
            if text is None:
                fresh = KeySet.fresh().to_json()
                if not await self.store.swap_secret(SECRET_NAME, None, fresh):
                    # Another host (or a lost answer to our own write) got there first.
                    text = await self.store.get_secret(SECRET_NAME)
                text = text or fresh
            try:
                self._stored = KeySet.from_json(text)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                # Not fixed by regenerating: that would silently revoke every key in use.
                raise KeyConfigError(
                    f"the stored host keys ({SECRET_NAME!r}) cannot be read: {exc!r}"
                ) from exc
            self._read_at = self.clock()
            return self._effective(self._stored)

    def cached(self) -> KeySet:
        """The keys as last read (for synchronous callers: links, binding JSON); ``load``
        must have run once."""
        assert self._stored is not None, "Keys.load() has not run"
        return self._effective(self._stored)

    async def current(self) -> KeySet:
        """The keys, re-read from the store when the copy is older than ``REFRESH_SECONDS``.
        A store that cannot be read keeps the last copy (auth must not fail open or closed
        on a blip)."""
        if self._stored is None:
            return await self.load()
        if self.clock() - self._read_at >= REFRESH_SECONDS and not self._lock.locked():
            try:
                return await self.load()
            except Exception:  # noqa: BLE001 - keep serving with the keys we have
                self._read_at = self.clock()
        return self._effective(self._stored)

    async def change(self, mutate: Callable[[KeySet], KeySet]) -> KeySet:
        """Apply ``mutate`` to the stored keys with a compare-and-swap, retried on conflict."""
        async with self._lock:
            for _ in range(8):
                text = await self.store.get_secret(SECRET_NAME)
                base = KeySet.from_json(text) if text is not None else KeySet.fresh()
                new = mutate(base).to_json()
                if await self.store.swap_secret(SECRET_NAME, text, new):
                    stored = new
                else:
                    stored = await self.store.get_secret(SECRET_NAME) or ""
                    if stored != new:  # somebody else's change came in between: redo ours
                        continue
                self._stored = KeySet.from_json(stored)
                self._read_at = self.clock()
                return self._effective(self._stored)
        raise KeyChangeError(409, "The keys kept changing; try again.")

    # --- what the admin API does --------------------------------------------------------

    def _refuse_fixed(self, scope: str, name: str) -> None:
        label = MASTER if scope == "host" and name == MASTER else f"{scope}/{name}"
        setting = self.fixed.get(label)
        if setting is not None:
            raise KeyChangeError(
                409, f"The key {name} is set by the {setting} setting; change it there."
            )

    async def list(self, scope: str, function: str | None = None) -> dict[str, str]:
        keys = await self.current()
        return dict(_scope(keys, scope, function))

    async def get(self, scope: str, name: str, function: str | None = None) -> str | None:
        keys = await self.current()
        if scope == "host" and name == MASTER:
            return keys.master
        return _scope(keys, scope, function).get(name)

    async def put(
        self, scope: str, name: str, value: str | None, function: str | None = None
    ) -> tuple[str, bool]:
        """Set (or, with no value, generate) a key; returns the value and whether it is new."""
        if not (KEY_NAME.match(name) or (scope == "host" and name == MASTER)):
            raise KeyChangeError(400, "A key name is 1-64 letters, digits, '.', '_' or '-'.")
        self._refuse_fixed(scope, name)
        new_value = check_value(value, "The key value") if value is not None else generate()
        created = False

        def mutate(keys: KeySet) -> KeySet:
            nonlocal created
            if scope == "host" and name == MASTER:
                return replace(keys, master=new_value)
            values = dict(_scope(keys, scope, function))
            created = name not in values
            if created and len(values) >= MAX_KEYS:
                raise KeyChangeError(409, f"At most {MAX_KEYS} keys per scope.")
            values[name] = new_value
            return _with_scope(keys, scope, function, values)

        await self.change(mutate)
        return new_value, created

    async def delete(self, scope: str, name: str, function: str | None = None) -> bool:
        if (scope == "host" and name == MASTER) or (
            scope == "system" and name == DURABLE_SYSTEM_KEY
        ):
            raise KeyChangeError(400, f"The key {name} cannot be deleted; rotate it instead.")
        self._refuse_fixed(scope, name)
        found = False

        def mutate(keys: KeySet) -> KeySet:
            nonlocal found
            values = dict(_scope(keys, scope, function))
            found = values.pop(name, None) is not None
            return _with_scope(keys, scope, function, values)

        await self.change(mutate)
        return found


def describe(keys: KeySet, fixed: Mapping[str, str]) -> dict[str, Any]:
    """The keys as the ``keys`` command shows them (with the setting that fixes a key)."""
    return {
        "master": {"name": MASTER, "value": keys.master, "setting": fixed.get(MASTER)},
        "host": [
            {"name": n, "value": v, "setting": fixed.get(f"host/{n}")}
            for n, v in sorted(keys.host.items())
        ],
        "system": [{"name": n, "value": v} for n, v in sorted(keys.system.items())],
        "functions": {
            f: [{"name": n, "value": v} for n, v in sorted(ks.items())]
            for f, ks in sorted(keys.functions.items())
        },
    }
