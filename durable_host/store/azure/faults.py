"""Lost responses on demand, for tests: ``DURABLE_HOST_AZURE_FAULTS="point[@n],..."``.

After the n-th successful write at ``point`` (``commit``, ``complete``, ``send``, ``stage``;
n defaults to 1) the store raises as if the response had been lost on the way back. Tests
use it to prove that a retried write applies exactly once. Without the variable, ``hit``
is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import logging
import os

from azure.core.exceptions import ServiceResponseError

log = logging.getLogger("durable_host.store.azure")


class LostResponses:
    """A plan of writes whose responses are lost (see the module docstring)."""

    def __init__(self, spec: str) -> None:
        self._plan: dict[str, set[int]] = {}
        self._seen: dict[str, int] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            point, _, count = item.partition("@")
            self._plan.setdefault(point, set()).add(int(count or 1))

    @classmethod
    def from_environment(cls) -> LostResponses:
        return cls(os.environ.get("DURABLE_HOST_AZURE_FAULTS", ""))

    def hit(self, point: str) -> None:
        """Called after each successful write at ``point``."""
        if point not in self._plan:
            return
        self._seen[point] = self._seen.get(point, 0) + 1
        if self._seen[point] in self._plan[point]:
            log.warning("fault injection: response of %s@%d lost", point, self._seen[point])
            raise ServiceResponseError(f"fault injection: response of {point} lost")
