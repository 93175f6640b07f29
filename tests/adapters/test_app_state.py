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
    with pytest.raises(StateStoreConfigError, match="identity-based"):
        storage_connection({"AzureWebJobsStorage__accountName": "a"})
    with pytest.raises(StateStoreConfigError, match="needs the AzureWebJobsStorage"):
        storage_connection({"AGENT_STATE_STORE": "blob"})
    assert container_name("AGENT_LEDGER_CONTAINER", "agent-ledger", {}) == "agent-ledger"
