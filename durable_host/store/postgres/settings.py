"""Connection settings of the PostgreSQL store, and how they are shown (pure).

The connection is a libpq URL (``postgresql://user@host:5432/db?sslmode=verify-full``) or
keyword string (``host=... dbname=... sslmode=require sslrootcert=/path/ca.pem``), from
``--store postgres:<conninfo>`` or else the setting ``DURABLE_HOST_POSTGRES`` (environment or
``local.settings.json`` Values). libpq reads every TLS parameter (``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``, ``sslcrl``) and the ``PG*`` environment variables
itself, so they pass through unchanged.

The password never leaves this module in text: ``describe`` names the server without it,
and ``redact`` removes it (and any ``password=``/URL userinfo) from a message before that
message reaches a log, a status or an error.

Other settings (environment): ``DURABLE_HOST_POSTGRES_POOL`` (connections, default 10),
``DURABLE_HOST_POSTGRES_STATEMENT_TIMEOUT_MS`` (default 30000), ``DURABLE_HOST_LEASE_SECONDS``
(the hub lease, 5-60, default 15), ``DURABLE_HOST_SILENCE_SECONDS`` (a heartbeat unchanged
that long makes its host dead: ``membership``; 1-60, default a third of the lease, 3 s at least),
``DURABLE_HOST_POSTGRES_RETRY_SECONDS`` (how long an
operation retries a lost connection before it fails as a store error, default 10).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from psycopg import conninfo as pg_conninfo

from durable_host.cluster.membership import silence_setting

SETTING = "DURABLE_HOST_POSTGRES"
SCHEMA_PREFIX = "dh_"  # a hub's tables live in the schema dh_<hub, lower case>
HUB_PATTERN = r"[A-Za-z][A-Za-z0-9]{2,49}"  # as the Azure store's hubs


class PostgresSettingsError(ValueError):
    """The connection setting or a number beside it is missing or malformed."""


@dataclass(frozen=True)
class PostgresSettings:
    conninfo: str = field(repr=False)  # holds the password: never printed
    hub: str
    pool_size: int = 10
    statement_timeout_ms: int = 30_000
    lease_seconds: int = 15
    retry_seconds: float = 10.0
    silence_seconds: float = 5.0

    @property
    def schema(self) -> str:
        return SCHEMA_PREFIX + self.hub.lower()

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of the hub (an identifier: the schema's name)."""
        return self.schema

    def describe(self) -> str:
        return describe(self.conninfo)

    def __repr__(self) -> str:
        return f"PostgresSettings({self.describe()}, hub={self.hub!r})"


def from_spec(spec: str, hub: str, env: dict[str, str] | None = None) -> PostgresSettings:
    """``spec`` is ``postgres`` (the connection from ``DURABLE_HOST_POSTGRES``) or
    ``postgres:<conninfo>``."""
    env = dict(os.environ) if env is None else env
    given = spec.removeprefix("postgres").removeprefix(":").strip()
    conninfo = given or env.get(SETTING, "").strip()
    if not conninfo:
        raise PostgresSettingsError(
            f"--store postgres needs the {SETTING} setting (a libpq URL or keyword string) in"
            " the environment or local.settings.json, or --store postgres:<url>"
        )
    try:
        params = pg_conninfo.conninfo_to_dict(conninfo)
    except Exception as exc:  # noqa: BLE001 - psycopg's parse error may quote the text
        raise PostgresSettingsError(
            f"{SETTING} is not a valid libpq connection string: {redact(str(exc), conninfo)}"
        ) from None
    if "connect_timeout" not in params:
        conninfo = pg_conninfo.make_conninfo(conninfo, connect_timeout=10)
    if not re.fullmatch(HUB_PATTERN, hub):
        raise PostgresSettingsError(
            f"hub name {hub!r} must be 3-50 letters or digits, starting with a letter"
        )
    lease = _int(env, "DURABLE_HOST_LEASE_SECONDS", 15, 5, 60)
    try:
        silence = silence_setting(env, lease)
    except ValueError as exc:
        raise PostgresSettingsError(str(exc)) from None
    return PostgresSettings(
        conninfo=conninfo,
        hub=hub,
        pool_size=_int(env, "DURABLE_HOST_POSTGRES_POOL", 10, 1, 200),
        statement_timeout_ms=_int(
            env, "DURABLE_HOST_POSTGRES_STATEMENT_TIMEOUT_MS", 30_000, 0, 3_600_000
        ),
        lease_seconds=lease,
        retry_seconds=float(_int(env, "DURABLE_HOST_POSTGRES_RETRY_SECONDS", 10, 0, 3600)),
        silence_seconds=silence,
    )


def _int(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise PostgresSettingsError(f"{name} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise PostgresSettingsError(f"{name} must be between {low} and {high}, not {value}")
    return value


def describe(conninfo: str) -> str:
    """``postgres user@host:port/db`` without the password (for logs and errors)."""
    try:
        params = pg_conninfo.conninfo_to_dict(conninfo)
    except Exception:  # noqa: BLE001 - an unparsable setting is described as such
        return "postgres (unparsable connection setting)"
    user = str(params.get("user") or os.environ.get("PGUSER") or "")
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    db = params.get("dbname") or os.environ.get("PGDATABASE") or user
    ssl = params.get("sslmode")
    where = f"{user + '@' if user else ''}{host}:{port}/{db}"
    return f"postgres {where}" + (f" (sslmode={ssl})" if ssl else "")


def redact(text: str, conninfo: str) -> str:
    """``text`` without the password of ``conninfo`` (nor any password= or URL userinfo)."""
    try:
        password = str(pg_conninfo.conninfo_to_dict(conninfo).get("password") or "")
    except Exception:  # noqa: BLE001 - then only the patterns below apply
        password = ""
    if password:
        text = text.replace(password, "***")
    text = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", text, flags=re.IGNORECASE)
    return re.sub(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)
