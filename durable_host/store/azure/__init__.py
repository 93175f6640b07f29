"""The Azure Storage task hub: one table and one blob container per hub, async SDK clients.

Same observable semantics as the SQLite store (``store/base.py`` states the contract);
``docs/azure-storage.md`` explains the layout, the commit protocol with the crash analysis
of every step, fencing between host processes, and measured costs. ``store.py`` maps the
modules of this package.
"""

from durable_host.store.azure.errors import (
    AzureStoreError,
    HubLeaseLostError,
    StoreConflictError,
    StoreUnavailableError,
)
from durable_host.store.azure.faults import LostResponses
from durable_host.store.azure.store import AzureStore

__all__ = [
    "AzureStore",
    "AzureStoreError",
    "HubLeaseLostError",
    "LostResponses",
    "StoreConflictError",
    "StoreUnavailableError",
]
