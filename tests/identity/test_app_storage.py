"""The app's blob adapters on identity-based storage: Azurite in OAuth mode over HTTPS, tokens
from the managed-identity endpoint stand-in, no connection string anywhere."""

from __future__ import annotations

import uuid

import pytest

from adapters import app_state
from adapters.content_store import BlobContentStore, default_store
from functions_connections import forget_credentials
from tests.identity.support import CLIENT_ID, IdentityEndpoint

STORAGE = "https://storage.azure.com"


@pytest.fixture(autouse=True)
def _fresh_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    # Clients hold the credential they were made with; each test has an endpoint of its own.
    monkeypatch.setattr(app_state, "_containers", {})
    monkeypatch.setattr(app_state, "RETRY_ATTEMPTS", 3)


def test_the_content_store_works_with_only_identity_settings(
    identity_env: dict[str, str],
    identity_endpoint: IdentityEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_CONTENT_CONTAINER", f"id-{uuid.uuid4().hex[:12]}")
    assert app_state.state_store_kind() == "blob"
    store = default_store()

    ref = store.put("kept with a managed identity " * 100)

    assert store.get(ref) == "kept with a managed identity " * 100
    # The token was the user-assigned identity's, for storage, and it was used: the endpoint
    # was asked once (the credential caches the token) and Azurite checked what it was sent.
    assert identity_endpoint.requests
    assert {r["resource"] for r in identity_endpoint.requests} == {STORAGE}
    assert {r["client_id"] for r in identity_endpoint.requests} == {CLIENT_ID}
    assert len(identity_endpoint.requests) == 1


def test_azurite_refuses_a_token_for_another_audience(
    identity_env: dict[str, str], identity_endpoint: IdentityEndpoint
) -> None:
    """The control: the bearer tokens are checked, so the test above is not passing on
    anonymous access."""
    from azure.core.exceptions import HttpResponseError

    identity_endpoint.audience = "https://vault.azure.net"
    connection = app_state.storage_connection()

    with pytest.raises(HttpResponseError) as refused:
        app_state.container_client(connection, f"id-{uuid.uuid4().hex[:12]}")

    assert refused.value.status_code in (401, 403)


def test_an_identity_endpoint_that_is_down_is_a_clear_error_and_nothing_is_lost(
    identity_env: dict[str, str], identity_endpoint: IdentityEndpoint
) -> None:
    connection = app_state.storage_connection()
    name = f"id-{uuid.uuid4().hex[:12]}"
    ref = BlobContentStore(app_state.container_client(connection, name)).put("before the outage")
    forget_credentials()  # the next token must come from the endpoint, which is now down
    app_state._containers.clear()
    identity_endpoint.stop()

    with pytest.raises(app_state.StateStoreConfigError) as down:
        app_state.container_client(connection, name)

    message = str(down.value)
    assert "managed identity" in message and "AzureWebJobsStorage__credential" in message
    assert CLIENT_ID in message  # which identity, so the operator can check its roles
    identity_endpoint.start()  # back, on the same port
    store = BlobContentStore(app_state.container_client(connection, name))
    assert store.get(ref) == "before the outage"
