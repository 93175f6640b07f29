"""Bearer tokens for the durable HTTP call's ``token_source`` (``ManagedIdentityTokenSource``).

``bearer_token(resource, env)`` returns an access token for ``resource`` (a resource URI such as
``https://management.core.windows.net``, or a scope ending in ``/.default``: both name the same
token) from the host's credential: the identity of its storage connection when that connection
is identity-based with ``AzureWebJobsStorage__credential=managedidentity`` (and ``__clientId``
for a user-assigned identity), as on a Function app; otherwise the Azure credential chain
(environment, workload identity, managed identity, Azure CLI). The credential and its token
cache are the process's (``functions_connections``), so a call does not ask the identity
endpoint again while its token is valid.

No credential, or none that answers, raises ``PermissionError`` naming the resource and what
was tried. The token itself is added to the outgoing request only: it is never part of the
call's recorded request, its result, an error or a log line.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

CONNECTION = "AzureWebJobsStorage"


def scope_of(resource: str) -> str:
    """The ``/.default`` scope of a resource (a scope is returned as it is)."""
    resource = resource.strip()
    return resource if resource.endswith("/.default") else resource.rstrip("/") + "/.default"


async def bearer_token(resource: str, env: Mapping[str, str] | None = None) -> str:
    from azure.core.exceptions import AzureError

    from functions_connections import credential

    env = os.environ if env is None else env
    parts = {k.lower(): v.strip() for k, v in env.items()}
    managed = parts.get(f"{CONNECTION}__credential".lower(), "").lower() == "managedidentity"
    client_id = parts.get(f"{CONNECTION}__clientid".lower()) or None
    cred = credential(managed_identity=managed, client_id=client_id)
    try:
        token = await asyncio.to_thread(cred.get_token, scope_of(resource))
    except AzureError as exc:
        reason = " ".join(str(exc.message or exc).split())[:800]
        raise PermissionError(
            f"No managed identity token for {resource!r} on this host: {reason}"
        ) from None  # the chain of a credential failure may carry what it was sent
    return token.token
