"""Fixtures of the identity suite: one TLS certificate and one OAuth Azurite per module, a
fresh identity endpoint per test, and the process environment switched to identity-based
settings (no ``AzureWebJobsStorage`` connection string) for the test's duration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from functions_connections import forget_credentials
from tests.harness import store_specs
from tests.identity.support import (
    IdentityEndpoint,
    OAuthAzurite,
    identity_settings,
    make_certificate,
    start_oauth_azurite,
)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def oauth_azurite(
    certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OAuthAzurite]:
    if "azure" not in store_specs():
        pytest.skip("DURABLE_TEST_STORES does not include azure")
    cert, key = certificate
    storage = start_oauth_azurite(cert, key, tmp_path_factory.mktemp("azurite") / "azurite.log")
    yield storage
    storage.stop()


@pytest.fixture
def identity_endpoint() -> Iterator[IdentityEndpoint]:
    endpoint = IdentityEndpoint().start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def identity_env(
    monkeypatch: pytest.MonkeyPatch,
    oauth_azurite: OAuthAzurite,
    identity_endpoint: IdentityEndpoint,
    certificate: tuple[Path, Path],
) -> Iterator[dict[str, str]]:
    """This process's environment as a Function app on identity-based storage has it."""
    settings = identity_settings(oauth_azurite, identity_endpoint, certificate[0])
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    forget_credentials()  # a credential reads the identity endpoint's settings when made
    yield settings
    forget_credentials()
