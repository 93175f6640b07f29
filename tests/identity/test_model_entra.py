"""Azure OpenAI with Microsoft Entra ID: the OpenAI-compatible test server demands a bearer
token issued by the managed-identity endpoint stand-in for Cognitive Services, and refuses an
expired one or one for another audience with 401."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiohttp import web

from adapters.model_provider import ProviderConfig, complete
from functions_connections import forget_credentials
from kernel.turn.model_io import ModelFailure, ModelRequest, ModelSuccess
from tests.app.turn_support import ModelServer
from tests.identity.support import CLIENT_ID, IdentityEndpoint

COGNITIVE = "https://cognitiveservices.azure.com"
REQUEST = ModelRequest(messages=({"role": "user", "content": "hello"},))


class EntraModelServer(ModelServer):
    """The test model server behind Entra ID: 401 unless the token is valid for it."""

    def __init__(self, endpoint: IdentityEndpoint) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.refused = 0

    async def _completions(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if "api-key" in request.headers or not self.endpoint.valid(
            auth.removeprefix("Bearer "), COGNITIVE
        ):
            self.refused += 1
            return web.json_response({"error": {"message": "invalid token"}}, status=401)
        return await super()._completions(request)


@pytest.fixture
def model(
    identity_endpoint: IdentityEndpoint, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[EntraModelServer, ProviderConfig]]:
    for name, value in identity_endpoint.env().items():
        monkeypatch.setenv(name, value)
    forget_credentials()
    server = EntraModelServer(identity_endpoint).start()
    config = ProviderConfig.from_settings(
        {
            "AGENT_MODEL_BASE_URL": server.base_url,
            "AGENT_MODEL_NAME": "gpt-test",
            "AGENT_MODEL_AUTH": "entra",
            "AzureWebJobsStorage__credential": "managedidentity",
            "AzureWebJobsStorage__clientId": CLIENT_ID,
        }
    )
    assert config is not None
    yield server, config
    server.stop()
    forget_credentials()


def test_an_entra_model_gets_the_identitys_token_and_a_fresh_one_once_it_expires(
    model: tuple[EntraModelServer, ProviderConfig], identity_endpoint: IdentityEndpoint
) -> None:
    server, config = model
    identity_endpoint.lifetime = 3  # seconds: expired before the second call

    first = asyncio.run(complete(config, REQUEST, 10))
    time.sleep(3.5)
    second = asyncio.run(complete(config, REQUEST, 10))

    assert isinstance(first, ModelSuccess) and isinstance(second, ModelSuccess)
    assert server.refused == 0
    tokens = [r["headers"]["Authorization"] for r in server.requests]
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert identity_endpoint.resources() == [COGNITIVE, COGNITIVE]
    assert {r["client_id"] for r in identity_endpoint.requests} == {CLIENT_ID}


def test_a_refused_token_is_a_fatal_failure_not_retried(
    model: tuple[EntraModelServer, ProviderConfig], identity_endpoint: IdentityEndpoint
) -> None:
    server, config = model
    identity_endpoint.audience = "https://storage.azure.com"  # a token, but not for the model

    result = asyncio.run(complete(config, REQUEST, 10))

    assert isinstance(result, ModelFailure) and result.kind == "fatal"
    assert "401" in result.message
    assert server.refused == 1  # one request: the orchestrator decides, never a loop here


def test_no_identity_endpoint_is_a_transient_failure_naming_the_identity(
    model: tuple[EntraModelServer, ProviderConfig], identity_endpoint: IdentityEndpoint
) -> None:
    server, config = model
    identity_endpoint.stop()

    result = asyncio.run(complete(config, REQUEST, 30))

    assert isinstance(result, ModelFailure) and result.kind == "transient"
    assert "managed identity" in result.message and CLIENT_ID in result.message
    assert server.requests == []
