"""Fixtures for the adapter contract suites: a blob container of its own per test, on the
session's Azurite (skipped when ``DURABLE_TEST_STORES`` leaves azure out), and a fault
injector for blob writes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest


@pytest.fixture
def blob_container(request: pytest.FixtureRequest) -> Any:
    from adapters import app_state

    connection = request.getfixturevalue("azurite_connection")
    return app_state.container_client(connection, f"t-{uuid.uuid4().hex[:16]}")


class FlakyContainer:
    """A container whose next ``n`` blob writes fail with a transient error: ``lost`` applies
    the write and loses its answer (the worst case for a conditional write), ``unsent`` fails
    before anything is sent."""

    def __init__(self, container: Any) -> None:
        self._container = container
        self.faults: list[str] = []
        self.hits = 0

    def get_blob_client(self, name: str) -> Any:
        return _FlakyBlob(self, self._container.get_blob_client(name))


class _FlakyBlob:
    def __init__(self, owner: FlakyContainer, blob: Any) -> None:
        self._owner = owner
        self._blob = blob

    def __getattr__(self, name: str) -> Any:
        return getattr(self._blob, name)

    def upload_blob(self, *args: Any, **kwargs: Any) -> Any:
        from azure.core.exceptions import ServiceRequestError, ServiceResponseError

        if not self._owner.faults:
            return self._blob.upload_blob(*args, **kwargs)
        fault = self._owner.faults.pop(0)
        self._owner.hits += 1
        if fault == "unsent":
            raise ServiceRequestError("connection reset before the request was sent")
        self._blob.upload_blob(*args, **kwargs)
        raise ServiceResponseError("connection reset before the response arrived")
