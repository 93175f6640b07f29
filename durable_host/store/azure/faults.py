"""Lost responses on demand, for tests: ``DURABLE_HOST_AZURE_FAULTS="point[@n|%p],..."``.

After the n-th successful write at ``point`` (``commit``, ``complete``, ``send``, ``stage``;
n defaults to 1) the store raises as if the response had been lost on the way back. Tests
use it to prove that a retried write applies exactly once. The point ``request`` fails a
request of any kind before it is sent (a connection that could not be made). ``%p`` makes
a point fire at p percent of its passes (``durable_host.ops.faults``). The plan format and its parser
are the host's one fault mechanism (``durable_host.ops.faults``); this adds only the error an
Azure client raises when a response is lost.
"""

from __future__ import annotations

from azure.core.exceptions import ServiceRequestError, ServiceResponseError

from durable_host.ops import faults


class LostResponses(faults.FaultPlan):
    """A plan of writes whose responses are lost (see the module docstring)."""

    @classmethod
    def from_environment(cls) -> LostResponses:
        return cls.from_env(faults.AZURE_FAULTS)

    def hit(self, point: str) -> None:
        """Called after each successful write at ``point``."""
        self.lose(point, ServiceResponseError)

    def refuse(self, point: str) -> None:
        """Called before each request: fail it at a planned pass, as if it was never sent."""
        if self:
            self.fail(point, ServiceRequestError("fault injection: request not sent"))
