"""Provider errors and replies mapped to the kernel's envelopes."""

from __future__ import annotations

import pytest

from adapters.model_provider import (
    ModelSettingError,
    ProviderConfig,
    failure_from_status,
    openai_client,
    response_from_openai,
    retry_after,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limited"),
        (500, "transient"),
        (503, "transient"),
        (408, "transient"),
        (400, "fatal"),
        (401, "fatal"),
        (404, "fatal"),
    ],
)
def test_http_statuses_become_failure_kinds(status, kind):
    assert failure_from_status(status, {}, "x").kind == kind


def test_a_429_carries_the_providers_retry_after():
    assert failure_from_status(429, {"Retry-After": "7"}, "slow down").retry_after == 7.0
    assert retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({}) is None


def test_a_reply_with_tool_calls_becomes_a_neutral_response():
    reply = {
        "model": "m",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "function": {
                                "name": "calculator",
                                "arguments": '{"expression": "1+1"}',
                            },
                        },
                        {"id": "c2", "function": {"name": "calculator", "arguments": "not json"}},
                    ],
                },
            }
        ],
    }

    response = response_from_openai(reply, "default")

    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("c1", {"expression": "1+1"}),
        ("c2", {"unparsed_arguments": "not json"}),
    ]
    assert response.usage.total_tokens == 5 and response.model == "m"


def test_no_base_url_means_no_provider_and_azure_sends_its_version_and_key():
    assert ProviderConfig.from_settings({"AGENT_MODEL_BASE_URL": " "}) is None
    config = ProviderConfig.from_settings(
        {
            "AGENT_MODEL_BASE_URL": "https://r.openai.azure.com/openai/deployments/d",
            "AGENT_MODEL_API_KEY": "k",
            "AGENT_MODEL_API_VERSION": "2024-10-21",
        }
    )

    client = openai_client(config, 5)

    assert client.default_query["api-version"] == "2024-10-21"
    assert client.default_headers["api-key"] == "k"


def test_entra_sends_no_key_and_takes_the_storage_connections_identity():
    config = ProviderConfig.from_settings(
        {
            "AGENT_MODEL_BASE_URL": "https://r.openai.azure.com/openai/deployments/d",
            "AGENT_MODEL_API_VERSION": "2024-10-21",
            "AGENT_MODEL_AUTH": "Entra",
            "azurewebjobsstorage__credential": "managedidentity",
            "AzureWebJobsStorage__clientId": "cid",
        }
    )
    assert config is not None

    client = openai_client(config, 5)

    assert config.auth == "entra" and config.managed_identity and config.client_id == "cid"
    assert config.token_scope == "https://cognitiveservices.azure.com/.default"
    assert "api-key" not in client.default_headers
    assert client.default_query["api-version"] == "2024-10-21"


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"AGENT_MODEL_AUTH": "apikey"}, "AGENT_MODEL_AUTH must be"),
        ({"AGENT_MODEL_AUTH": "entra", "AGENT_MODEL_API_KEY": "k"}, "remove AGENT_MODEL_API_KEY"),
    ],
)
def test_bad_model_auth_settings_are_named(settings, named):
    with pytest.raises(ModelSettingError, match=named) as caught:
        ProviderConfig.from_settings({"AGENT_MODEL_BASE_URL": "https://m.example", **settings})

    assert "'k'" not in str(caught.value)
