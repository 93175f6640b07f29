"""Azure credentials for a connection, from ``azure-identity``, one per process and kind.

* ``__credential=managedidentity``: ``ManagedIdentityCredential`` (``__clientId`` for a
  user-assigned identity), as the Functions host does; on App Service and Functions it asks the
  local identity endpoint (``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER``).
* otherwise ``DefaultAzureCredential`` without its interactive parts: the environment
  (``AZURE_CLIENT_ID`` with a secret or certificate), workload identity on Kubernetes, managed
  identity, then the developer's Azure CLI / azd / PowerShell sign-in.

Every credential is the SDK's synchronous one, wrapped (``ClearCredential``) so that a token
that cannot be had raises ``IdentityUnavailableError``: a ``ServiceRequestError``, which the
storage code already retries with back-off as it retries an unreachable service (an identity
endpoint that is down for a moment loses nothing), and whose message says which setting's
credential failed and for which scope. ``AsyncCredential`` lends the same credential to the
SDK's async clients through a worker thread, so one token cache serves the whole process and
no event loop owns it. Tokens are cached and refreshed by ``azure-identity`` (five minutes
before they expire); nothing here logs, stores or quotes a token or a client secret.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Self

from azure.core.credentials import AccessToken, TokenCredential
from azure.core.exceptions import AzureError, ServiceRequestError

from functions_connections.settings import StorageConnection


class IdentityUnavailableError(ServiceRequestError):
    """No token could be had from the credential; retried like an unreachable service."""


class ClearCredential:
    """A synchronous ``TokenCredential`` whose failures name their setting (never a secret)."""

    def __init__(self, inner: TokenCredential, source: str) -> None:
        self._inner = inner
        self.source = source

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        try:
            return self._inner.get_token(*scopes, **kwargs)
        except IdentityUnavailableError:
            raise
        except AzureError as exc:  # refused, unavailable, or the endpoint unreachable
            # The SDK's message describes the endpoint's answer; a token is never part of it.
            reason = " ".join(str(exc.message or exc).split())[:600]
            raise IdentityUnavailableError(
                f"no token for {' '.join(scopes)} from {self.source}: {reason}"
            ) from exc

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class AsyncCredential:
    """The async ``TokenCredential`` shape over a ``ClearCredential``, through a thread."""

    def __init__(self, sync: ClearCredential) -> None:
        self.sync = sync

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return await asyncio.to_thread(self.sync.get_token, *scopes, **kwargs)

    async def close(self) -> None:
        """Nothing to close: the synchronous credential is shared by the process."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None


_credentials: dict[tuple[bool, str | None], ClearCredential] = {}
_lock = threading.Lock()


def credential_for(connection: StorageConnection) -> ClearCredential:
    """The process's credential for an identity-based connection (see the module docstring)."""
    return credential(
        managed_identity=connection.managed_identity,
        client_id=connection.client_id,
        source=connection.describe(),
    )


def credential(
    *, managed_identity: bool, client_id: str | None, source: str | None = None
) -> ClearCredential:
    """One credential per process and kind: its token cache is what spares the endpoint."""
    key = (managed_identity, client_id)
    with _lock:
        found = _credentials.get(key)
        if found is None:
            found = ClearCredential(_build(managed_identity, client_id), source or _source(key))
            _credentials[key] = found
        return found


def _source(key: tuple[bool, str | None]) -> str:
    managed, client_id = key
    which = f" (client id {client_id})" if client_id else ""
    return f"the managed identity{which}" if managed else "the Azure credential chain"


def _build(managed_identity: bool, client_id: str | None) -> TokenCredential:
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    if managed_identity:
        return ManagedIdentityCredential(client_id=client_id)
    return DefaultAzureCredential(
        managed_identity_client_id=client_id,
        exclude_interactive_browser_credential=True,
        exclude_visual_studio_code_credential=True,
    )


def token_provider(cred: ClearCredential, scope: str) -> Callable[[], str]:
    """A callable giving a valid bearer token for ``scope``, refreshed before it expires."""
    from azure.identity import get_bearer_token_provider

    return get_bearer_token_provider(cred, scope)


def forget_credentials() -> None:
    """Drop the cached credentials (tests that change the identity settings between cases)."""
    with _lock:
        for cred in _credentials.values():
            cred.close()
        _credentials.clear()
