"""Lost responses on demand, for tests: ``DURABLE_HOST_AZURE_FAULTS="point[@n],..."``.

After the n-th successful write at ``point`` (``commit``, ``complete``, ``send``, ``stage``;
n defaults to 1) the store raises as if the response had been lost on the way back. Tests
use it to prove that a retried write applies exactly once. The plan format and its parser
are the host's one fault mechanism (``durable_host.faults``); this adds only the error an
Azure client raises when a response is lost.
"""

from __future__ import annotations

from azure.core.exceptions import ServiceResponseError

from durable_host import faults


class LostResponses(faults.FaultPlan):
    """A plan of writes whose responses are lost (see the module docstring)."""

    @classmethod
    def from_environment(cls) -> LostResponses:
        return cls.from_env(faults.AZURE_FAULTS)

    def hit(self, point: str) -> None:
        """Called after each successful write at ``point``."""
        self.lose(point, ServiceResponseError)
