"""Where the app keeps its shared state (attempt ledger, content store): files or Azure Blob.

The rule, from the app settings (no code change between a laptop and a Function app):

* ``AGENT_STATE_STORE=file`` or ``blob`` decides explicitly;
* otherwise ``blob`` when the app's storage connection ``AzureWebJobsStorage`` is set (a
  storage account connection string, or ``UseDevelopmentStorage=true`` for Azurite),
  and ``file`` when it is not (the embedded default: ``.durable/`` in the working directory).

A Function app always has ``AzureWebJobsStorage`` and may run on many instances at once, so it
gets blobs: one ledger and one content store that every instance sees. The durable host's
SQLite mode needs no storage account; run it with ``AGENT_STATE_STORE=file`` when the
environment holds an ``AzureWebJobsStorage`` anyway (the host does not tell the app which store
it runs on, and the app knows nothing about its host).

Blob settings: ``AGENT_LEDGER_CONTAINER`` (default ``agent-ledger``) and
``AGENT_CONTENT_CONTAINER`` (default ``agent-content``), created when missing. The connection
is read as the Functions host reads it (``functions_connections``): a connection string, or the
identity-based form (``AzureWebJobsStorage__accountName`` or ``__blobServiceUri``, with
``__credential=managedidentity`` and ``__clientId`` on Azure); a setting that is neither, or
both, is a ``StateStoreConfigError`` naming the settings looked for.

Clients are the SDK's synchronous ones, one per process and connection: the ports are
synchronous (the session entity is a plain function; activities call the ports through
``asyncio.to_thread``), and a synchronous client may be shared by threads, while an async one
belongs to one event loop. The SDK's own retries are off (``retry_total=0``): a retried
conditional write whose first response was lost would report a conflict with itself, so the
blob adapters retry themselves and re-read to decide (``retry_transient``).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from functions_connections import (
    ConnectionSettingError,
    StorageConnection,
    blob_service,
    read_connection,
)

StateStoreKind = Literal["file", "blob"]
T = TypeVar("T")

LEDGER_CONTAINER_DEFAULT = "agent-ledger"
CONTENT_CONTAINER_DEFAULT = "agent-content"
_CONTAINER_NAME = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$")
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
RETRY_ATTEMPTS = 8


class StateStoreConfigError(RuntimeError):
    """The settings do not describe a usable state store; the message names the setting."""


def state_store_kind(env: Mapping[str, str] | None = None) -> StateStoreKind:
    env = os.environ if env is None else env
    explicit = (env.get("AGENT_STATE_STORE") or "").strip().lower()
    if explicit in ("file", "blob"):
        return explicit  # type: ignore[return-value]
    if explicit:
        raise StateStoreConfigError(f"AGENT_STATE_STORE must be 'file' or 'blob', not {explicit!r}")
    if (env.get("AzureWebJobsStorage") or "").strip():
        return "blob"
    if any(k.lower().startswith("azurewebjobsstorage__") for k in env):
        return "blob"  # identity-based (functions_connections reads it; case is ignored)
    return "file"


def container_name(setting: str, default: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    name = (env.get(setting) or "").strip() or default
    if not _CONTAINER_NAME.match(name):
        raise StateStoreConfigError(
            f"{setting}={name!r} is not a blob container name (3-63 lowercase letters, digits"
            " and single hyphens, starting and ending with a letter or digit)"
        )
    return name


def storage_connection(env: Mapping[str, str] | None = None) -> StorageConnection:
    env = os.environ if env is None else env
    if not (env.get("AzureWebJobsStorage") or "").strip() and not any(
        k.lower().startswith("azurewebjobsstorage__") for k in env
    ):
        raise StateStoreConfigError(
            "AGENT_STATE_STORE=blob needs the AzureWebJobsStorage setting (a connection string,"
            " UseDevelopmentStorage=true for Azurite, or AzureWebJobsStorage__accountName /"
            " __blobServiceUri for an identity-based connection)"
        )
    try:
        return read_connection("AzureWebJobsStorage", env)
    except ConnectionSettingError as exc:
        raise StateStoreConfigError(str(exc)) from exc


_containers: dict[tuple[StorageConnection | str, str], Any] = {}
_lock = threading.Lock()


def container_client(connection: StorageConnection | str, name: str) -> Any:
    """The container ``name`` on ``connection``, created if missing; one client per process."""
    from azure.core.exceptions import ResourceExistsError

    with _lock:
        found = _containers.get((connection, name))
        if found is not None:
            return found
        try:
            service = blob_service(
                connection, retry_total=0, connection_timeout=10, read_timeout=30
            )
        except ConnectionSettingError as exc:
            raise StateStoreConfigError(str(exc)) from exc
        container = service.get_container_client(name)

        def create() -> None:
            try:
                container.create_container()
            except ResourceExistsError:
                pass

        try:
            retry_transient(create)
        except Exception as exc:
            if not is_transient(exc):
                raise
            raise StateStoreConfigError(
                f"the blob container {name!r} on AzureWebJobsStorage cannot be reached ({exc});"
                " start the storage emulator, fix the setting, or set AGENT_STATE_STORE=file"
                " (a single instance only)"
            ) from exc
        _containers[(connection, name)] = container
        return container


def is_transient(exc: BaseException) -> bool:
    """A failure after which the request may or may not have been applied, worth retrying."""
    from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return True
    return isinstance(exc, HttpResponseError) and exc.status_code in _TRANSIENT_STATUS


def backoff(attempt: int) -> None:
    time.sleep(min(2.0, 0.05 * 2**attempt))


def retry_transient(call: Callable[[], T]) -> T:
    """``call()`` again after transient failures; only for calls that are safe to repeat."""
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc) or attempt == RETRY_ATTEMPTS - 1:
                raise
            backoff(attempt)
    raise AssertionError("unreachable")


def create_once(blob: Any, body: str) -> bool:
    """Upload ``body`` to ``blob`` only if it is absent: True when this call created it.

    Transient failures are retried. A conflict on a retry may be an earlier try of ours whose
    answer was lost, so each call stores a token of its own in the blob's metadata and a
    conflict after a retry re-reads it: ours means created, another means someone else was first.
    """
    from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

    token = uuid.uuid4().hex
    for attempt in range(RETRY_ATTEMPTS):
        try:
            blob.upload_blob(body, overwrite=False, metadata={"write": token})
            return True
        except ResourceExistsError:
            if attempt == 0:
                return False
            try:
                stored = retry_transient(blob.get_blob_properties)
            except ResourceNotFoundError:
                return False  # created by another and deleted since: not ours either way
            return bool((stored.metadata or {}).get("write") == token)
        except Exception as exc:
            if not is_transient(exc) or attempt == RETRY_ATTEMPTS - 1:
                raise
            backoff(attempt)
    raise AssertionError("unreachable")
