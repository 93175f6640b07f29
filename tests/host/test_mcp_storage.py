"""MCP tools with the Storage extension's bindings, on a real host over loopback, driven by the
official ``mcp`` client: Microsoft's remote MCP sample (``tests/apps/mcp_snippets``) saves and
reads snippets through blob bindings named by ``{mcptoolargs.snippetname}``, over both
transports and in both of the sample's forms; a failing tool writes nothing; a storage error or
an argument the path needs but the call lacks is that call's ``isError`` result and the host
goes on; ``{mcpsessionid}`` names a blob by the client's session; a resource reads a blob.

The app's storage is ``AzureWebJobsStorage``, as in the sample: ``UseDevelopmentStorage=true``
with the task hub in SQLite (the host starts its Azurite, or uses the emulator already on the
default ports), the session's Azurite with the Azure store (the hub and the bindings in one
account, as on Azure)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient

from durable_host.ops import azurite
from tests.harness import APPS, HostProcess, store_specs
from tests.host.mcp_client import connect


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    if request.param not in ("sqlite", "azure"):
        pytest.skip("the sample runs on the SQLite and Azure stores here")
    tmp: Path = tmp_path_factory.mktemp("mcp-storage")
    app = tmp / "app"  # the host keeps its Azurite's files under <app>/.durable
    shutil.copytree(APPS / "mcp_snippets", app, ignore=shutil.ignore_patterns("__pycache__"))
    if request.param == "sqlite":
        proc = HostProcess(
            app,
            f"sqlite:{tmp / 'hub.db'}",
            env={"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
            log_path=tmp / "host.log",
        )
    else:
        from tests.conftest import azure_env

        proc = HostProcess(app, "azure", env=azure_env(request, "snippets"), log_path=tmp / "h.log")
    proc.start(timeout=60)
    yield proc
    assert proc.stop() == 0


def account(host: HostProcess) -> str:
    connection = host.env["AzureWebJobsStorage"]
    return azurite.connection_string() if connection.startswith("UseDevelopment") else connection


def blob(host: HostProcess, container: str, name: str) -> bytes | None:
    client = BlobServiceClient.from_connection_string(account(host))
    try:
        return client.get_blob_client(container, name).download_blob().readall()
    except ResourceNotFoundError:
        return None


def text(result: Any) -> str:
    return str(result.content[0].text)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_the_samples_snippets_are_saved_and_read_through_blob_bindings(
    host: HostProcess, transport: str
) -> None:
    name = f"s{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with connect(host.base_url, transport) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert {"hello_mcp", "get_snippet", "save_snippet"} <= set(listed)
            # the bound parameter is no tool property, the arguments are
            assert set(listed["save_snippet"].input_schema["properties"]) == {
                "snippetname",
                "snippet",
            }
            assert text(await client.call_tool("hello_mcp", {})) == "Hello I am MCPTool!"

            saved = await client.call_tool("save_snippet", {"snippetname": name, "snippet": "x=1"})
            assert (saved.is_error, text(saved)) == (False, "Snippet 'x=1' saved successfully")
            assert blob(host, "snippets", f"{name}.json") == b"x=1"
            assert text(await client.call_tool("get_snippet", {"snippetname": name})) == "x=1"
            missing = await client.call_tool("get_snippet", {"snippetname": name + "-none"})
            assert text(missing) == f"Snippet '{name}-none' not found"

            # the sample's earlier form: generic trigger, toolProperties, the context JSON
            other = name + "-v1"
            saved = await client.call_tool(
                "save_snippet_v1", {"snippetname": other, "snippet": "y"}
            )
            assert text(saved) == "Snippet 'y' saved successfully"
            assert text(await client.call_tool("get_snippet", {"snippetname": other})) == "y"
            assert text(await client.call_tool("get_snippet_v1", {"snippetname": name})) == "x=1"

            # a resource's blob input (a fixed path: resources have no mcptoolargs)
            pinned = await client.call_tool(
                "save_snippet", {"snippetname": "pinned", "snippet": name}
            )
            assert not pinned.is_error
            read = await client.read_resource("snippet://pinned")
            assert read.contents[0].text == name

    run(go())


def test_failures_are_the_calls_error_results_and_write_nothing(host: HostProcess) -> None:
    name = f"f{uuid.uuid4().hex[:8]}"
    topic = f"t{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with connect(host.base_url) as client:
            failed = await client.call_tool("save_then_fail", {"snippetname": name})
            assert failed.is_error
            assert "the snippet store is read-only today" in text(failed)
            assert blob(host, "snippets", f"{name}.json") is None  # outputs only on success

            # a missing input blob is None, which this function does not expect
            assert (await client.call_tool("get_snippet_v1", {"snippetname": name})).is_error

            # the path needs an argument the call lacks (not required by the declaration)
            lacking = await client.call_tool("save_snippet_v1", {"snippet": "z"})
            assert lacking.is_error
            assert "No value for named parameter 'mcptoolargs.snippetname'." in text(lacking)

            # a queue name the queue service refuses: the storage error is the call's error
            refused = await client.call_tool("post_note", {"topic": "bad--name", "note": "n"})
            assert refused.is_error, text(refused)
            posted = await client.call_tool("post_note", {"topic": topic, "note": "still here"})
            assert (posted.is_error, text(posted)) == (False, "queued")

    run(go())
    queue = QueueServiceClient.from_connection_string(account(host)).get_queue_client(
        f"notes-{topic}"
    )
    assert [base64.b64decode(m.content) for m in queue.peek_messages()] == [b"still here"]


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_mcpsessionid_names_a_blob_by_the_clients_session(
    host: HostProcess, transport: str
) -> None:
    kept = f"k{uuid.uuid4().hex}"

    async def go() -> None:
        async with connect(host.base_url, transport) as client:
            result = await client.call_tool("remember", {"text": kept})
            assert (result.is_error, text(result)) == (False, "kept"), text(result)

    run(go())
    container = BlobServiceClient.from_connection_string(account(host)).get_container_client(
        "sessions"
    )
    names = [
        b.name for b in container.list_blobs() if blob(host, "sessions", b.name) == kept.encode()
    ]
    assert len(names) == 1 and names[0].endswith(".txt") and len(names[0]) > len(".txt"), names
