"""Functions connection settings turned into Azure SDK clients and credentials.

Shared by the app (``adapters/``) and the durable host (``durable_host/``), which may not
import each other: this package imports neither. It reads a connection the way the Functions
host reads it (``settings``), builds ``azure-identity`` credentials for the identity-based form
(``credentials``) and the storage clients of either form (``clients``). Deployment settings and
the role assignments they need: ``docs/deploy.md``.
"""

from functions_connections.clients import blob_service, queue_service, table_service
from functions_connections.credentials import (
    AsyncCredential,
    ClearCredential,
    IdentityUnavailableError,
    credential,
    credential_for,
    forget_credentials,
    token_provider,
)
from functions_connections.settings import (
    ConnectionSettingError,
    StorageConnection,
    read_connection,
)

__all__ = [
    "AsyncCredential",
    "ClearCredential",
    "ConnectionSettingError",
    "IdentityUnavailableError",
    "StorageConnection",
    "blob_service",
    "credential",
    "credential_for",
    "forget_credentials",
    "queue_service",
    "read_connection",
    "table_service",
    "token_provider",
]
