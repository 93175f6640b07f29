"""Read a Functions connection setting the way the Functions host reads it (no IO, no SDK).

A connection named ``NAME`` (``AzureWebJobsStorage`` for the app's storage) is either

* a connection string in ``NAME`` (``UseDevelopmentStorage=true`` included), or
* identity-based: ``NAME__accountName`` (the public cloud's ``https://<account>.blob|table|
  queue.core.windows.net``) and/or ``NAME__blobServiceUri`` (also ``NAME__serviceUri``),
  ``NAME__tableServiceUri``, ``NAME__queueServiceUri``; ``NAME__credential=managedidentity``
  with an optional ``NAME__clientId`` (a user-assigned identity).

``read_connection(name, env)`` returns a ``StorageConnection`` or raises
``ConnectionSettingError`` whose message names the settings it looked for: neither form, both
forms, a service URI that is not an absolute ``https`` URL (a bearer token is never sent in the
clear), an account name Azure would refuse, an unknown ``__credential``. A service the
connection cannot reach (``uri("table")`` with only a blob URI) is the same error, raised when
that service is asked for. Messages never quote a connection string (it holds the account key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Service = Literal["blob", "table", "queue"]
SERVICES: tuple[Service, ...] = ("blob", "table", "queue")
# What each part of a connection is called after ``NAME__`` (the Functions host ignores case).
_URI_KEYS: dict[Service, tuple[str, ...]] = {
    "blob": ("blobServiceUri", "serviceUri"),
    "table": ("tableServiceUri",),
    "queue": ("queueServiceUri",),
}
_KNOWN = {"accountname", "credential", "clientid"} | {
    key.lower() for keys in _URI_KEYS.values() for key in keys
}
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
MANAGED_IDENTITY = "managedidentity"


class ConnectionSettingError(ValueError):
    """The settings do not describe a usable connection; the message names the settings."""


@dataclass(frozen=True, slots=True)
class StorageConnection:
    """One connection: a connection string, or service URIs and how to get a token."""

    name: str
    connection_string: str | None = field(default=None, repr=False)  # holds the key
    service_uris: tuple[tuple[Service, str], ...] = ()
    managed_identity: bool = False  # ``__credential=managedidentity``
    client_id: str | None = None  # a user-assigned identity

    @property
    def identity_based(self) -> bool:
        return self.connection_string is None

    def uri(self, service: Service) -> str:
        """The service's endpoint of an identity-based connection."""
        for known, uri in self.service_uris:
            if known == service:
                return uri
        looked_for = " or ".join(f"{self.name}__{key}" for key in _URI_KEYS[service][:1])
        raise ConnectionSettingError(
            f"the connection {self.name} has no {service} service: set {self.name}__accountName"
            f" or {looked_for}"
        )

    def describe(self) -> str:
        """Where this connection's token comes from, for error messages (no secret in it)."""
        if self.managed_identity:
            which = f" (client id {self.client_id})" if self.client_id else ""
            return f"the managed identity{which} of {self.name}__credential"
        return (
            f"the Azure credential chain of {self.name} (environment, workload identity,"
            " managed identity, Azure CLI)"
        )


def read_connection(name: str, env: Mapping[str, str]) -> StorageConnection:
    """The connection ``name`` from ``env`` (app settings); see the module docstring."""
    connection_string = (env.get(name) or "").strip()
    prefix = name.lower() + "__"
    parts = {
        key[len(prefix) :].lower(): (key, value.strip())
        for key, value in env.items()
        if key.lower().startswith(prefix) and value.strip()
    }
    if connection_string and parts:
        names = ", ".join(sorted(key for key, _ in parts.values()))
        raise ConnectionSettingError(
            f"the connection {name} is given twice: a connection string in {name} and"
            f" identity-based settings ({names}); keep one of the two forms"
        )
    if connection_string:
        return StorageConnection(name, connection_string=connection_string)
    if not parts:
        raise ConnectionSettingError(
            f"the connection {name} is not set: looked for a connection string in {name}, or"
            f" {name}__accountName / {name}__blobServiceUri / {name}__tableServiceUri /"
            f" {name}__queueServiceUri (with {name}__credential=managedidentity on Azure)"
        )
    unknown = sorted(key for low, (key, _) in parts.items() if low not in _KNOWN)
    if unknown:
        raise ConnectionSettingError(
            f"unknown connection setting {', '.join(unknown)}: {name}__ takes accountName,"
            " blobServiceUri, tableServiceUri, queueServiceUri, credential and clientId"
        )
    uris = _service_uris(name, parts)
    credential = parts.get("credential", ("", ""))[1]
    if credential and credential.lower() != MANAGED_IDENTITY:
        raise ConnectionSettingError(
            f"{name}__credential={credential!r} is not supported: use managedidentity, or leave"
            " it out for the Azure credential chain (environment, workload identity, managed"
            " identity, Azure CLI)"
        )
    client_id = parts.get("clientid", ("", ""))[1] or None
    return StorageConnection(
        name,
        service_uris=uris,
        managed_identity=bool(credential),
        client_id=client_id,
    )


def _service_uris(
    name: str, parts: Mapping[str, tuple[str, str]]
) -> tuple[tuple[Service, str], ...]:
    account = parts.get("accountname", ("", ""))[1]
    if account and not _ACCOUNT.match(account):
        raise ConnectionSettingError(
            f"{name}__accountName={account!r} is not a storage account name (3-24 lowercase"
            " letters and digits)"
        )
    found: list[tuple[Service, str]] = []
    for service in SERVICES:
        given = next(
            (parts[key.lower()] for key in _URI_KEYS[service] if key.lower() in parts), None
        )
        if given is not None:
            found.append((service, _checked_uri(*given)))
        elif account:
            found.append((service, f"https://{account}.{service}.core.windows.net"))
    if not found:
        raise ConnectionSettingError(
            f"the connection {name} names no storage service: set {name}__accountName or"
            f" {name}__blobServiceUri / {name}__tableServiceUri / {name}__queueServiceUri"
        )
    return tuple(found)


def _checked_uri(setting: str, value: str) -> str:
    try:
        parsed = urlsplit(value)
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConnectionSettingError(f"{setting} is not a URL: {exc}") from exc
    # Checked before the value is ever quoted: a query may be a SAS token.
    if parsed.query or parsed.fragment or parsed.username or parsed.password:
        raise ConnectionSettingError(
            f"{setting} must be a plain service URL, without credentials, query or fragment"
        )
    if parsed.scheme.lower() != "https" or not parsed.hostname:
        raise ConnectionSettingError(
            f"{setting}={value!r} is not an https URL (https://<account>.<service>.core."
            "windows.net): a token is only ever sent over TLS"
        )
    return value.rstrip("/")
