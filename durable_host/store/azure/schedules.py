"""Timer-trigger schedule status on Azure Storage: one blob per timer function under
``schedules/`` in the hub's container, with the same compare-and-swap as the host secrets
(create with ``If-None-Match: *``, replace with the ETag read). Unfenced for the same
reason: a compare-and-swap is safe between a host and its standby, and the claim of an
occurrence is exactly such a swap. A lost response makes a retried claim report False; the
claimer re-reads and recognises its own claim token (``durable_host/triggers/timer.py``).
"""

from __future__ import annotations

from typing import Any

from durable_host.store.azure.secrets import HubSecrets

PREFIX = "schedules/"


class HubSchedules(HubSecrets):
    def _blob(self, name: str) -> Any:  # the SDK's blob client
        return self.tables.container.get_blob_client(PREFIX + name)
