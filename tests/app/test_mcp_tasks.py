"""MCP tasks through the turn: a call the server runs as a task is followed by its task id, on
durable timers, and after a crash of the host polled again - never called again.

The server is ``tests/app/mcp_task_server.py`` (FastMCP with its tasks extension, from PyPI),
over Streamable HTTP; it counts the calls of its tool ``build`` (not idempotent) in a file,
and can hold one. Each test starts a host and the server (15-60 s on a loaded 2-core
machine), so the default run keeps the crash; the rest run with ``KERNEL_MCP_LONG=1``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.app.mcp_support import HttpServer, config, outcomes, tool_results, wait_file
from tests.app.turn_support import custom_status, submit, view, wait_final
from tests.harness import WEBHOOK, HostProcess, wait_for

long = pytest.mark.skipif(
    not os.environ.get("KERNEL_MCP_LONG"), reason="a long MCP test: KERNEL_MCP_LONG=1 runs it"
)
TOKEN = "tok-" + "7a" * 12
SESSION = "tasks"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    http = HttpServer(tmp_path / "mcp-tasks", TOKEN, script="mcp_task_server.py").start()
    yield http
    http.release("build")
    http.kill()


def task_host(
    factory: Callable[..., HostProcess], http: HttpServer, **kernel: object
) -> HostProcess:
    headers = {"Authorization": "Bearer %TEST_MCP_BEARER%"}
    servers = config(t={"url": http.url, "headers": headers, **kernel})
    return factory(
        {"AGENT_MCP_SERVERS": servers, "TEST_MCP_BEARER": TOKEN, "AGENT_TOOL_LEASE_S": "0.5"}
    )


def following(host: HostProcess, tool_task: str) -> str:
    """The server's task id, once the tool task polls it (its handle is saved by then)."""
    found = wait_for(
        lambda: custom_status(host, tool_task).get("mcp_task"), 60, f"{tool_task} to follow a task"
    )
    return str(found)


def running_task(host: HostProcess, server: HttpServer, name: str) -> tuple[str, str, str]:
    """Submit a turn that builds ``name`` while the server holds it; once the kernel follows
    the server's task: the submission, the tool task and the server's task id."""
    arrived = server.hold("build")
    sub = submit(host, SESSION, f'call mcp__t__build with {{"name": "{name}"}}')
    wait_file(arrived)
    tool_task = f"{sub}:tool:1:0"
    return sub, tool_task, following(host, tool_task)


def results(host: HostProcess) -> list[dict]:
    return [data["result"] for data in tool_results(host, SESSION)]


def test_a_task_is_polled_to_its_result_and_after_a_crash_polled_again_not_called_again(
    fresh_kernel_host, server
):
    host = task_host(fresh_kernel_host, server).start()
    sub, tool_task, task_id = running_task(host, server, "a")
    assert view(host, SESSION)["tasks"][tool_task]["phase"] == "mcp_task"
    host.kill()  # the task goes on at the server; its handle is in the ledger and the history

    host.start()
    assert following(host, tool_task) == task_id  # the same task, polled again
    server.release("build")
    final = wait_final(host, SESSION, sub)

    assert final["status"] == "completed" and final["answer"] == "mcp__t__build: built a"
    assert server.calls("build") == 1  # not idempotent, and never sent again
    assert [(o["ok"], o["runs"]) for o in outcomes(host, SESSION)] == [(True, 1)]
    [result] = results(host)
    assert result["structuredContent"] == {"result": "built a"}
    assert view(host, SESSION)["tasks"][tool_task]["status"] == "completed"
    assert not (server.folder / "build.cancelled").exists()


@long
def test_a_failed_task_and_a_task_past_its_time_are_failures_and_the_turn_goes_on(
    fresh_kernel_host, server
):
    host = task_host(fresh_kernel_host, server, taskTimeoutS=3).start()
    server.hold("build")
    text = (
        'call mcp__t__broken with {"reason": "no disk"} and then '
        'call mcp__t__build with {"name": "b"} and then calculate 2+2'
    )
    sub = submit(host, SESSION, text)
    final = wait_final(host, SESSION, sub)

    broken, build, _sum = results(host)
    assert broken["ok"] is False and "cannot: no disk" in broken["message"]
    assert build["kind"] == "mcp_task_timeout" and "it was cancelled" in build["message"]
    assert final["answer"].splitlines()[-1] == "2+2 = 4"
    assert server.calls("build") == 1  # a task past its time is not sent again
    wait_for(lambda: (server.folder / "build.cancelled").exists(), 30, "the server's cancel")


@long
def test_a_task_the_server_forgot_is_lost_and_a_non_idempotent_call_is_not_sent_again(
    fresh_kernel_host, server
):
    host = task_host(fresh_kernel_host, server).start()
    sub, _, _ = running_task(host, server, "c")
    server.kill()  # its tasks were in its memory
    server.release("build")
    server.start()  # the same address, no tasks
    final = wait_final(host, SESSION, sub)

    [result] = results(host)
    assert result["kind"] == "mcp_task_lost", result
    assert final["answer"].startswith("mcp__t__build did not complete (mcp_task_lost)")
    assert server.calls("build") == 1


@long
def test_a_turn_cancelled_while_the_server_runs_its_task_cancels_the_task(
    fresh_kernel_host, server
):
    host = task_host(fresh_kernel_host, server).start()
    sub, tool_task, _ = running_task(host, server, "d")

    signalled = host.post(
        f"{WEBHOOK}/entities/session/{SESSION}?op=cancel",
        {"submission_id": sub, "reason": "the user left"},
    )
    assert signalled.status == 202, signalled.body
    final = wait_final(host, SESSION, sub)

    assert final["status"] == "cancelled"
    wait_for(lambda: (server.folder / "build.cancelled").exists(), 30, "the server's cancel")
    [result] = results(host)
    assert result["kind"] == "cancelled" and "the user left" in result["message"]
    assert view(host, SESSION)["tasks"][tool_task]["status"] == "cancelled"
    assert server.calls("build") == 1
