"""The kernel as an MCP server: its three MCP tools (``api/mcp_tools.py``).

The tools' functions are called directly with a durable client of a real host (the client an
activity or route gets, built from the host's binding JSON), and once through the official
``mcp`` client against the host's ``/runtime/webhooks/mcp``. That last test needs the host's
MCP extension support; it skips, saying so, only while the host answers 404 there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import azure.durable_functions as df
import pytest

from api import mcp_tools
from durable_host.server import client_binding_json
from tests.app.conftest import kernel_env
from tests.harness import ROOT, HostProcess, kernel_function_app, store_spec_for, wait_for

MCP_PATH = "/runtime/webhooks/mcp"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("mcp-kernel")
    process = HostProcess(ROOT, store_spec_for("sqlite", tmp, "kernel"), env=kernel_env(tmp))
    process.start()
    yield process
    process.kill()


def client_of(host: HostProcess) -> df.DurableOrchestrationClient:
    hub = host.env.get("DURABLE_HOST_HUB", "hub")
    return df.DurableOrchestrationClient(client_binding_json(host.base_url, host.base_url, hub))


# One event loop for the module: the durable SDK's client keeps an HTTP session bound to the
# loop it first ran on.
LOOP = asyncio.new_event_loop()


def run(coroutine: Any) -> Any:
    return LOOP.run_until_complete(coroutine)


def test_submit_answers_when_the_turn_ends_within_the_bound(host: HostProcess) -> None:
    client = client_of(host)

    first = run(mcp_tools.submit(client, "mcp-s1", "calculate 2+3", "r1", 60))
    again = run(mcp_tools.submit(client_of(host), "mcp-s1", "calculate 2+3", "r1", 60))

    assert (first["finished"], first["status"], first["answer"]) == (True, "completed", "2+3 = 5")
    assert first["duplicate"] is False
    assert (again["submissionId"], again["duplicate"], again["answer"]) == (
        first["submissionId"],
        True,
        "2+3 = 5",
    )


def test_submit_without_waiting_says_how_to_follow_and_read_session_follows(
    host: HostProcess,
) -> None:
    started = run(mcp_tools.submit(client_of(host), "mcp-s2", "calculate 6*7", "r1", 0))

    assert started["finished"] is False and "read_session" in started["follow"]
    done = wait_for(
        lambda: (
            found
            if (found := run(mcp_tools.read(client_of(host), "mcp-s2", started["submissionId"])))[
                "status"
            ]
            == "completed"
            else None
        ),
        60,
        "the submission to complete",
    )
    assert done["answer"] == "6*7 = 42"
    whole = run(mcp_tools.read(client_of(host), "mcp-s2"))
    assert [e["role"] for e in whole["entries"]][:1] == ["user"]
    assert whole["submissions"][0]["status"] == "completed"


def test_answer_approval_decides_a_waiting_tool_task(host: HostProcess) -> None:
    started = run(mcp_tools.submit(client_of(host), "mcp-s3", "delete document plans", "r1", 0))

    def waiting() -> list[dict[str, Any]] | None:
        found = run(mcp_tools.read(client_of(host), "mcp-s3"))["waiting"]
        return [w for w in found if w["phase"] == "approval"] or None

    [task] = wait_for(waiting, 60, "the approval to wait")
    decided = run(mcp_tools.approve(client_of(host), "mcp-s3", task["toolTaskId"], "reject", "d1"))
    final = run(mcp_tools.submit(client_of(host), "mcp-s3", "delete document plans", "r1", 60))

    assert decided["status"] == 202 and decided["decision"] == "reject"
    assert final["submissionId"] == started["submissionId"] and final["finished"]
    assert "delete_document did not complete (rejected)" in final["answer"]


def test_bad_arguments_are_answered_as_errors_not_raised(host: HostProcess) -> None:
    client = client_of(host)

    assert run(mcp_tools.submit(client, "bad id!", "x", "r1", 0))["error"] == "invalid_session_id"
    assert run(mcp_tools.read(client, "nobody-here"))["error"] == "session_not_found"
    refused = run(mcp_tools.approve(client, "mcp-s1", "no-such-task", "maybe", "d1"))
    assert refused["field"] == "decision"


def test_the_mcp_tools_are_declared_with_their_arguments() -> None:
    function_app = kernel_function_app()

    tools = {
        f.get_function_name(): json.loads(b.tool_properties)
        for f in function_app.app.get_functions()
        for b in f.get_bindings()
        if b.type == "mcpToolTrigger"
    }

    assert set(tools) == {"submit_to_session", "read_session", "answer_approval"}
    assert [(p["propertyName"], p["isRequired"]) for p in tools["submit_to_session"]] == [
        ("session_id", True),
        ("text", True),
        ("request_id", True),
        ("wait_seconds", False),
    ]


def test_an_mcp_client_drives_the_kernel_through_the_host(host: HostProcess) -> None:
    probe = host.post(MCP_PATH, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    if probe.status == 404:
        pytest.skip(f"the host answers 404 at {MCP_PATH}: its MCP extension support is not here")
    from mcp import Client

    async def drive() -> tuple[list[str], dict[str, Any]]:
        async with Client(host.base_url + MCP_PATH) as client:
            listed = await client.list_tools()
            called = await client.call_tool(
                "submit_to_session",
                {"session_id": "mcp-e2e", "text": "calculate 1+2", "request_id": "r1"},
            )
            text = "".join(c.text for c in called.content if c.type == "text")
            return sorted(t.name for t in listed.tools), json.loads(text)

    names, answer = run(drive())

    assert {"submit_to_session", "read_session", "answer_approval"} <= set(names)
    assert (answer["status"], answer["answer"]) == ("completed", "1+2 = 3")
