"""The Azure store's errors, and which Azure SDK errors are worth retrying.

``AzureStoreError`` is the root of the store's own errors; Azure SDK exceptions never leave
the store: the public methods of ``AzureStore`` are wrapped in ``translate_azure_errors``.

* ``StoreUnavailableError`` - Azure Storage did not answer within the retry budget (the
  engine retries the episode later).
* ``StoreConflictError`` - another writer changed the instance since it was read.
* ``HubLeaseLostError`` - this host can no longer use the task hub at all (a
  ``StoreLostError``); losing one partition is ``store.base.UnitLostError`` instead.
* ``WorkItemGoneError`` - a step's commit found a work item already completed; nothing
  applied (internal: ``commit_step`` answers None).
* ``RequestRejectedError`` - the service refused a request as malformed or too large
  (400, 413): the payload is at fault, not the storage, so it is *not* a ``StoreError``
  and counts towards poison like any failure of the work itself.

Every other error is a ``StoreError`` (``store/base.py``): the engine retries the work
without counting the attempt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from durable_host.store.base import StoreError, StoreLockedError, StoreLostError

T = TypeVar("T")
P = ParamSpec("P")

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class AzureStoreError(StoreError):
    """Root of the Azure store's own errors."""


class StoreUnavailableError(AzureStoreError, ConnectionError):
    """Azure Storage did not answer within the retry budget."""


class StoreConflictError(AzureStoreError):
    """Another writer changed the instance since it was read; re-run the episode."""


class HubLeaseLostError(StoreLockedError, StoreLostError):
    """This host no longer owns the task hub; it must not write."""


class WorkItemGoneError(Exception):
    """A step's commit found one of its work items already completed (another run reported
    it): nothing was applied. Not a failure of the storage; the store answers None."""


class RequestRejectedError(Exception):
    """Azure Storage refused the request itself (400, 413): what was sent is at fault."""


_REJECTED_STATUS = frozenset({400, 413})


def is_transient(exc: BaseException) -> bool:
    """Connection errors, timeouts and 408/429/5xx: the same request may succeed later."""
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(exc, HttpResponseError) and exc.status_code in _TRANSIENT_STATUS


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a service error (None for a connection error)."""
    return getattr(exc, "status_code", None)


def translate_azure_errors(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Translate any Azure SDK error that got this far into the store's own errors."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except AzureError as exc:
            if status_of(exc) in _REJECTED_STATUS:
                raise RequestRejectedError(f"Azure Storage refused {fn.__name__}: {exc}") from exc
            raise AzureStoreError(f"Azure Storage rejected {fn.__name__}: {exc}") from exc

    return wrapper
