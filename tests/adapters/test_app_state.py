"""Which state store the app settings choose (``adapters.app_state``)."""

from __future__ import annotations

import pytest

from adapters.app_state import (
    StateStoreConfigError,
    container_name,
    state_store_kind,
    storage_connection,
)

DEV = "UseDevelopmentStorage=true"
ACCOUNT = (
    "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5;EndpointSuffix=core.windows.net"
)


@pytest.mark.parametrize(
    ("env", "kind"),
    [
        ({}, "file"),  # the embedded default: no storage account
        ({"AzureWebJobsStorage": ""}, "file"),
        ({"AzureWebJobsStorage": DEV}, "blob"),
        ({"AzureWebJobsStorage": ACCOUNT}, "blob"),
        ({"AzureWebJobsStorage__accountName": "a"}, "blob"),  # refused when a client is made
        ({"AzureWebJobsStorage": ACCOUNT, "AGENT_STATE_STORE": "file"}, "file"),
        ({"AGENT_STATE_STORE": " Blob ", "AzureWebJobsStorage": DEV}, "blob"),
    ],
)
def test_the_settings_choose_files_or_blobs(env, kind):
    assert state_store_kind(env) == kind


def test_bad_settings_are_named_in_the_error():
    with pytest.raises(StateStoreConfigError, match="AGENT_STATE_STORE"):
        state_store_kind({"AGENT_STATE_STORE": "s3"})
    with pytest.raises(StateStoreConfigError, match="AGENT_LEDGER_CONTAINER"):
        container_name(
            "AGENT_LEDGER_CONTAINER", "agent-ledger", {"AGENT_LEDGER_CONTAINER": "Bad_Name"}
        )
    with pytest.raises(StateStoreConfigError, match="AzureWebJobsStorage__accountName"):
        storage_connection({"AzureWebJobsStorage__accountName": "a"})
    with pytest.raises(StateStoreConfigError, match="needs the AzureWebJobsStorage"):
        storage_connection({"AGENT_STATE_STORE": "blob"})
    assert container_name("AGENT_LEDGER_CONTAINER", "agent-ledger", {}) == "agent-ledger"


def test_an_unreachable_container_is_an_error_that_says_what_to_do(monkeypatch):
    from adapters import app_state

    monkeypatch.setattr(app_state, "RETRY_ATTEMPTS", 2)
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    nowhere = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};"
        "BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
    )
    with pytest.raises(StateStoreConfigError, match="AGENT_STATE_STORE=file"):
        app_state.container_client(nowhere, "agent-ledger")
