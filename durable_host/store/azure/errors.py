"""The Azure store's errors, and which Azure SDK errors are worth retrying.

``AzureStoreError`` is the root of the store's own errors; Azure SDK exceptions never leave
the store: the public methods of ``AzureStore`` are wrapped in ``translate_azure_errors``.

* ``StoreUnavailableError`` - Azure Storage did not answer within the retry budget (the
  engine retries the episode later).
* ``StoreConflictError`` - another writer changed the instance since it was read.
* ``HubLeaseLostError`` - this host no longer owns the task hub (a ``StoreLockedError``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from durable_host.store.base import StoreLockedError

T = TypeVar("T")

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class AzureStoreError(Exception):
    """Root of the Azure store's own errors."""


class StoreUnavailableError(AzureStoreError, ConnectionError):
    """Azure Storage did not answer within the retry budget."""


class StoreConflictError(AzureStoreError):
    """Another writer changed the instance since it was read; re-run the episode."""


class HubLeaseLostError(StoreLockedError):
    """This host no longer owns the task hub; it must not write."""


def is_transient(exc: BaseException) -> bool:
    """Connection errors, timeouts and 408/429/5xx: the same request may succeed later."""
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(exc, HttpResponseError) and exc.status_code in _TRANSIENT_STATUS


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a service error (None for a connection error)."""
    return getattr(exc, "status_code", None)


def translate_azure_errors(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Translate any Azure SDK error that got this far into the store's own errors."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except AzureError as exc:
            raise AzureStoreError(f"Azure Storage rejected {fn.__name__}: {exc}") from exc

    return wrapper
