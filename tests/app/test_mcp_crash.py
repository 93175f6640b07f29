"""SIGKILL of the host during MCP calls, counted where the effect happens: at the server.

* ``mcp-server-git`` (the reference server, over stdio): the host is killed after a tool ran
  and before its result was saved (``KERNEL_FAULTS=tool.after_effect``); the commits in the
  repository say whether ``git_commit`` (not idempotent) was sent again;
* ``tests/app/mcp_http_server.py`` over Streamable HTTP: the host is killed while the server
  holds a call (the call has arrived; its answer never will), then restarted. The server counts
  the calls of each tool in a file.

Each test starts a host (or two) and real MCP servers, 15-70 s each on a loaded 2-core machine,
so the default run keeps one: a non-idempotent call killed mid-call. The rest run with
``KERNEL_MCP_LONG=1`` (docs/testing.md).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.app.mcp_support import (
    HttpServer,
    commits,
    config,
    git_repo,
    outcomes,
    stdio,
    tool_results,
    wait_file,
)
from tests.app.turn_support import (
    custom_status,
    run_id,
    submit,
    view,
    wait_final,
    wait_phase,
)
from tests.harness import WEBHOOK, HostProcess

pytestmark = pytest.mark.crash
long = pytest.mark.skipif(
    not os.environ.get("KERNEL_MCP_LONG"), reason="a long MCP crash test: KERNEL_MCP_LONG=1 runs it"
)
TOKEN = "tok-" + "5e" * 12
SESSION = "mcp"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    http = HttpServer(tmp_path / "mcp-http", TOKEN).start()
    yield http
    http.release("lookup")
    http.release("create_ticket")
    http.kill()


def http_config(http: HttpServer, **kernel: object) -> str:
    headers = {"Authorization": "Bearer %TEST_MCP_BEARER%"}
    return config(t={"url": http.url, "headers": headers, "maxAttempts": 2, **kernel})


def http_host(
    factory: Callable[..., HostProcess], http: HttpServer, **kernel: object
) -> HostProcess:
    return factory(
        {
            "AGENT_MCP_SERVERS": http_config(http, **kernel),
            "TEST_MCP_BEARER": TOKEN,
            "AGENT_TOOL_LEASE_S": "0.5",
        }
    )


def kill_while_held(host: HostProcess, http: HttpServer, tool: str, text: str) -> str:
    arrived = http.hold(tool)
    sub = submit(host, SESSION, text)
    wait_file(arrived)
    host.kill()
    http.release(tool)  # the held call ends at the server; its answer goes nowhere
    arrived.unlink()
    return sub


@long
def test_a_read_only_call_killed_mid_call_runs_again_and_one_result_is_recorded(
    fresh_kernel_host, server
):
    host = http_host(fresh_kernel_host, server).start()
    sub = kill_while_held(host, server, "lookup", 'call mcp__t__lookup with {"key": "k1"}')

    host.start()
    final = wait_final(host, SESSION, sub)

    assert final["status"] == "completed" and final["answer"] == "mcp__t__lookup: value of k1"
    assert server.calls("lookup") == 2  # sent again: the server declared it read-only
    assert [(o["ok"], o["runs"]) for o in outcomes(host, SESSION)] == [(True, 2)]
    assert len(tool_results(host, SESSION)) == 1


def test_a_non_idempotent_call_killed_mid_call_is_interrupted_and_not_sent_again(
    fresh_kernel_host, server
):
    host = http_host(fresh_kernel_host, server).start()
    sub = kill_while_held(
        host, server, "create_ticket", 'call mcp__t__create_ticket with {"title": "a"}'
    )

    host.start()
    final = wait_final(host, SESSION, sub)

    assert server.calls("create_ticket") == 1
    assert final["status"] == "completed"
    assert final["answer"].startswith("mcp__t__create_ticket did not complete (interrupted)")
    [result] = tool_results(host, SESSION)
    assert result["result"]["kind"] == "interrupted"
    task = view(host, SESSION)["tasks"][result["tool_task_id"]]
    assert task["status"] == "interrupted"


def operate_tool(host: HostProcess, task_id: str, action: str) -> None:
    response = host.post(
        f"/api/sessions/{SESSION}/tools/{urllib.parse.quote(task_id, safe='')}/operator",
        {"requestId": f"op-{action}", "action": action},
    )
    assert response.status == 202, (response.status, response.body)


@long
@pytest.mark.parametrize("action", ["retry", "abort"])
def test_with_on_interrupted_attention_the_call_parks_until_the_operator_decides(
    fresh_kernel_host, server, action
):
    host = http_host(fresh_kernel_host, server, onInterrupted="attention").start()
    sub = kill_while_held(
        host, server, "create_ticket", 'call mcp__t__create_ticket with {"title": "b"}'
    )

    host.start()
    task_id = f"{sub}:tool:1:0"
    parked = wait_phase(host, task_id, "needs_attention")
    assert (parked["server"], parked["mcp_tool"], json.loads(parked["arguments"])) == (
        "t",
        "create_ticket",
        {"title": "b"},
    )
    assert view(host, SESSION)["tasks"][task_id]["status"] == "needs_attention"
    assert server.calls("create_ticket") == 1  # parked: nothing sent while a person decides
    operate_tool(host, task_id, action)
    final = wait_final(host, SESSION, sub)

    if action == "retry":
        assert server.calls("create_ticket") == 2  # the operator's retry sent it once more
        assert final["answer"] == "mcp__t__create_ticket: ticket created: b"
    else:
        assert server.calls("create_ticket") == 1
        assert "aborted by the operator" in tool_results(host, SESSION)[0]["result"]["message"]


@long
def test_the_server_killed_mid_call_is_a_failure_entry_and_the_turn_goes_on(
    fresh_kernel_host, server
):
    host = http_host(fresh_kernel_host, server).start()
    arrived = server.hold("lookup")
    sub = submit(host, SESSION, 'call mcp__t__lookup with {"key": "k"} and then calculate 1+1')
    wait_file(arrived)
    server.kill()
    final = wait_final(host, SESSION, sub)

    lines = final["answer"].splitlines()
    assert lines[0].startswith("mcp__t__lookup did not complete (mcp_"), lines
    assert lines[1] == "1+1 = 2"
    [lookup, _] = outcomes(host, SESSION)
    assert lookup["ok"] is False
    # safe, so tried again (maxAttempts 2) - against a server that is gone
    assert view(host, SESSION)["tasks"][f"{sub}:tool:1:0"]["status"] == "failed"


@long
def test_a_tool_list_changed_between_the_crash_and_the_resume_parks_the_turn(
    fresh_kernel_host, server, tmp_path
):
    host = http_host(fresh_kernel_host, server).start()
    text = 'call mcp__t__lookup with {"key": "a"} and then call mcp__t__lookup with {"key": "b"}'
    sub = kill_while_held(host, server, "lookup", text)
    server.kill()
    changed = HttpServer(server.folder, TOKEN, variant="v2")
    changed.port, changed.url = server.port, server.url  # the same address, a new tool list
    changed.start()
    try:
        host.start()
        parked = wait_phase(host, run_id(SESSION, sub), "needs_attention")
        assert parked["reason"].startswith("environment_changed: mcp: ")
        response = host.post(
            f"/api/sessions/{SESSION}/submissions/{sub}/operator",
            {"requestId": "env-ok", "action": "retry"},
        )
        assert response.status == 202
        final = wait_final(host, SESSION, sub)
        assert final["answer"].splitlines() == [
            "mcp__t__lookup: value of a",
            "mcp__t__lookup: value of b",
        ]
        document = view(host, SESSION)["documents"][f"environment.{sub}"]["data"]
        assert document["allowed_by"] == "env-ok"
    finally:
        changed.kill()


@long
def test_a_secret_header_is_never_in_a_history_a_log_or_the_session(
    fresh_kernel_host, server, tmp_path, store_kind
):
    host = http_host(fresh_kernel_host, server).start()
    sub = submit(host, SESSION, 'call mcp__t__lookup with {"key": "s"}')
    assert wait_final(host, SESSION, sub)["status"] == "completed"

    query = urllib.parse.urlencode({"showInput": "true"})
    everything = [json.dumps(host.get(f"{WEBHOOK}/instances?{query}").json())]
    for instance in host.get(f"{WEBHOOK}/instances?{query}").json():
        everything.append(
            json.dumps(
                host.status(instance["instanceId"], "?showHistory=true&showHistoryOutput=true")
            )
        )
        everything.append(json.dumps(custom_status(host, instance["instanceId"])))
    everything.append(json.dumps(view(host, SESSION)))
    everything.append(host.log_path.read_text() if host.log_path else "")
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and "mcp-http" not in p.parts]
    blobs = app_blobs() if store_kind == "azure" else []
    assert len(everything) > 5 and (stored or blobs)
    assert not [i for i, text in enumerate(everything) if TOKEN in text]
    assert not [p for p in stored if TOKEN.encode() in p.read_bytes()]
    assert not [name for name, data in blobs if TOKEN.encode() in data]


def app_blobs() -> list[tuple[str, bytes]]:
    """Every blob of the app's own containers (ledger, content, previews...) on Azure."""
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(os.environ["AzureWebJobsStorage"])
    found = []
    for container in service.list_containers(name_starts_with="agent-"):
        client = service.get_container_client(container.name)
        for blob in client.list_blobs():
            found.append(
                (f"{container.name}/{blob.name}", client.download_blob(blob.name).readall())
            )
    return found


@long
def test_git_commit_is_not_sent_again_after_a_crash_and_git_log_is(fresh_kernel_host, tmp_path):
    repo = git_repo(tmp_path / "repo")
    git = stdio("mcp-server-git", "--repository", str(repo))
    host = fresh_kernel_host(
        {
            "AGENT_MCP_SERVERS": config(git=git),
            "AGENT_TOOL_LEASE_S": "0.5",
            "KERNEL_FAULTS": "tool.after_effect@1",
        }
    )
    commit = {"repo_path": str(repo), "message": "by the agent"}
    host.start()
    sub = submit(host, SESSION, f"call mcp__git__git_commit with {json.dumps(commit)}")
    assert host.wait_exit(120) != 0, "the fault point was not reached"
    host.env.pop("KERNEL_FAULTS")
    host.start()
    final = wait_final(host, SESSION, sub, timeout=120)

    assert commits(repo) == ["by the agent", "init"]  # it ran once; the crash did not repeat it
    assert final["answer"].startswith("mcp__git__git_commit did not complete (interrupted)")

    host.env["KERNEL_FAULTS"] = "tool.after_effect@1"
    host.kill()
    host.start()
    log = {"repo_path": str(repo), "max_count": 5}
    sub = submit(host, SESSION, f"call mcp__git__git_log with {json.dumps(log)}", "r2")
    assert host.wait_exit(120) != 0
    host.env.pop("KERNEL_FAULTS")
    host.start()
    final = wait_final(host, SESSION, sub, timeout=120)

    assert "by the agent" in final["answer"]  # read-only: it ran again and answered
    assert outcomes(host, SESSION)[-1]["runs"] == 2
    assert commits(repo) == ["by the agent", "init"]
