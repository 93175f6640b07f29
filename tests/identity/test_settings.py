"""Reading a Functions connection setting: both forms, and every bad setting named."""

from __future__ import annotations

import pytest

from functions_connections import ConnectionSettingError, StorageConnection, read_connection

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONNECTION_STRING = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY}"


def test_a_connection_string_is_taken_as_it_is_and_never_shown() -> None:
    found = read_connection("AzureWebJobsStorage", {"AzureWebJobsStorage": CONNECTION_STRING})

    assert found.connection_string == CONNECTION_STRING
    assert not found.identity_based
    assert KEY not in repr(found)


def test_an_account_name_gives_the_public_cloud_endpoints_and_managed_identity() -> None:
    found = read_connection(
        "AzureWebJobsStorage",
        {
            "AzureWebJobsStorage__accountName": "agentstore1",
            "AzureWebJobsStorage__credential": "managedidentity",
            "AzureWebJobsStorage__clientId": "11111111-2222-3333-4444-555555555555",
        },
    )

    assert found.identity_based and found.managed_identity
    assert found.client_id == "11111111-2222-3333-4444-555555555555"
    assert found.uri("blob") == "https://agentstore1.blob.core.windows.net"
    assert found.uri("table") == "https://agentstore1.table.core.windows.net"
    assert found.uri("queue") == "https://agentstore1.queue.core.windows.net"


def test_service_uris_override_the_account_and_any_other_name_works_too() -> None:
    found = read_connection(
        "MyStorage",
        {
            "MyStorage__accountName": "agentstore1",
            "MyStorage__blobServiceUri": "https://blobs.example.net/",
            "MYSTORAGE__TABLESERVICEURI": "https://127.0.0.1:10002/devstoreaccount1",
        },
    )

    assert found == StorageConnection(
        "MyStorage",
        service_uris=(
            ("blob", "https://blobs.example.net"),
            ("table", "https://127.0.0.1:10002/devstoreaccount1"),
            ("queue", "https://agentstore1.queue.core.windows.net"),
        ),
    )
    assert "credential chain" in found.describe()


def test_a_service_the_connection_lacks_is_an_error_naming_the_settings() -> None:
    found = read_connection(
        "AzureWebJobsStorage", {"AzureWebJobsStorage__blobServiceUri": "https://b.example.net"}
    )

    with pytest.raises(ConnectionSettingError, match="AzureWebJobsStorage__tableServiceUri"):
        found.uri("table")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "looked for a connection string in AzureWebJobsStorage, or AzureWebJobsStorage__"),
        ({"AzureWebJobsStorage": "  "}, "AzureWebJobsStorage__accountName"),
        (
            {"AzureWebJobsStorage": CONNECTION_STRING, "AzureWebJobsStorage__accountName": "a1b"},
            "given twice.*AzureWebJobsStorage__accountName",
        ),
        ({"AzureWebJobsStorage__accountName": "Not_An_Account"}, "__accountName='Not_An_Acc"),
        ({"AzureWebJobsStorage__blobServiceUri": "http://plain.example.net"}, "not an https URL"),
        ({"AzureWebJobsStorage__blobServiceUri": "blobs.example.net"}, "__blobServiceUri="),
        ({"AzureWebJobsStorage__tableServiceUri": "https://h:port/x"}, "__tableServiceUri is not"),
        (
            {"AzureWebJobsStorage__queueServiceUri": "https://q.example.net/?sig=SECRET"},
            "__queueServiceUri must be a plain service URL",
        ),
        (
            {"AzureWebJobsStorage__accountName": "abc", "AzureWebJobsStorage__credential": "x"},
            "__credential='x' is not supported",
        ),
        ({"AzureWebJobsStorage__accountNmae": "abc"}, "unknown connection setting"),
        ({"AzureWebJobsStorage__credential": "managedidentity"}, "names no storage service"),
    ],
)
def test_bad_settings_are_errors_naming_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConnectionSettingError, match=named) as caught:
        read_connection("AzureWebJobsStorage", env)

    assert KEY not in str(caught.value) and "SECRET" not in str(caught.value)


def test_a_deployment_ships_the_shared_package_and_its_credential_library(tmp_path) -> None:
    from tests.deploy.test_doctor import deployed_copy
    from tests.harness import ROOT

    app = deployed_copy(tmp_path / "app")

    assert (app / "functions_connections" / "settings.py").is_file()
    assert not (app / "durable_host").exists()
    for requirements in ("requirements.txt", "requirements-host.txt"):
        pins = (ROOT / requirements).read_text().splitlines()
        assert any(line.startswith("azure-identity==") for line in pins), requirements


def test_a_malformed_connection_string_is_named_and_never_quoted() -> None:
    from functions_connections import blob_service, table_service

    broken = StorageConnection("AzureWebJobsStorage", connection_string=f"AccountKey={KEY}")

    for make in (blob_service, table_service):
        with pytest.raises(ConnectionSettingError, match="AzureWebJobsStorage is not a valid") as e:
            make(broken)
        assert KEY not in str(e.value)
