"""The session workspace end to end: tools, snapshots, the API's reads and uploads, limits.

One host per store kind for the module; every test has a session of its own.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.conftest import kernel_env
from tests.app.turn_support import submit, view, wait_final
from tests.harness import ROOT, HostProcess, store_spec_for, store_specs


def workspace_env(tmp: Path) -> dict[str, str]:
    return {
        "AGENT_WORKSPACE_DIR": str(tmp / "workspaces"),
        "AGENT_WORKSPACE_STORE_DIR": str(tmp / "workspace-store"),
        "AGENT_WORKSPACE_MAX_FILE_BYTES": "4096",
        "AGENT_WORKSPACE_MAX_FILES": "5",
        "AGENT_SANDBOX_CPU_S": "1",
        "AGENT_SANDBOX_WALL_S": "8",
        "AGENT_SANDBOX_MEMORY_BYTES": str(256 * 1024 * 1024),
    }


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("workspace")
    kind = str(request.param)
    env = kernel_env(tmp, workspace_env(tmp), kind)
    if kind == "azure":
        from tests.conftest import azure_env

        env = {**azure_env(request, "ws"), **env}
        env["AGENT_WORKSPACE_CONTAINER"] = "ws-" + tmp.name.lower().replace("_", "-")[-20:]
    process = HostProcess(ROOT, store_spec_for(kind, tmp, "kernel"), env=env)
    process.start()
    yield process
    process.kill()


def turn(host: HostProcess, session: str, text: str, request_id: str = "r1") -> dict:
    sub = submit(host, session, text, request_id)
    return {**wait_final(host, session, sub, timeout=90), "sub": sub}


def workspace(host: HostProcess, session: str, query: str = "") -> dict:
    response = host.get(f"/api/sessions/{session}/workspace{query}")
    assert response.status == 200, (response.status, response.body)
    return response.json()


def put(host: HostProcess, session: str, path: str, data: bytes):
    return host.request("PUT", f"/api/sessions/{session}/workspace/files/{path}", raw=data,
                        headers={"Content-Type": "application/octet-stream"})  # fmt: skip


def test_tools_write_run_and_list_and_the_api_shows_which_task_changed_what(host):
    final = turn(
        host,
        "ws-a",
        "write file notes/report.md: total 3 and then "
        "run python: open('sum.txt', 'w').write(str(sum(range(5))))\nprint('done') and then "
        "list files and then show file sum.txt",
    )

    assert final["status"] == "completed", final
    assert "Python printed: done" in final["answer"]
    assert "- notes/report.md (7 bytes)" in final["answer"]
    assert final["answer"].endswith("File sum.txt:\n10")
    body = workspace(host, "ws-a")
    sub = final["sub"]
    by_path = {f["path"]: f for f in body["files"]}
    assert set(by_path) == {"notes/report.md", "sum.txt"}
    assert by_path["notes/report.md"]["changedBy"] == ids.tool_task_id(sub, 1, 0)
    assert by_path["sum.txt"]["changedBy"] == ids.tool_task_id(sub, 2, 0)
    assert body["task"] == ids.tool_task_id(sub, 2, 0)
    snapshots = host.get("/api/sessions/ws-a/workspace/snapshots").json()["snapshots"]
    assert [s["changed"] for s in snapshots] == [["sum.txt"], ["notes/report.md"]]
    older = workspace(host, "ws-a", f"?snapshot={snapshots[1]['snapshot']}")
    assert [f["path"] for f in older["files"]] == ["notes/report.md"]
    content = host.get("/api/sessions/ws-a/workspace/files/notes/report.md")
    assert (content.status, content.body) == (200, b"total 3")
    # the session document that commits it is the truth, with the task that committed it
    document = view(host, "ws-a")["documents"]["workspace"]
    assert document["data"]["snapshot"] == body["snapshot"]


def test_an_upload_is_a_snapshot_of_its_own_and_a_tool_sees_it(host):
    turn(host, "ws-b", "write file a.txt: first")
    response = put(host, "ws-b", "data/input.csv", b"x,y\n1,2\n")
    assert response.status == 201, response.body
    uploaded = response.json()
    assert uploaded["task"].startswith("upload:")

    final = turn(host, "ws-b", "show file data/input.csv", "r2")
    assert final["answer"] == "File data/input.csv:\nx,y\n1,2\n"
    body = workspace(host, "ws-b")
    assert body["snapshot"] == uploaded["snapshot"]
    by_path = {f["path"]: f["changedBy"] for f in body["files"]}
    assert by_path["data/input.csv"] == uploaded["task"]
    again = put(host, "ws-b", "data/input.csv", b"x,y\n1,2\n")
    assert (again.status, again.json()["unchanged"]) == (200, True)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("..%2Fescape.txt", "must not contain '..'"),
        ("a/%2E%2E/%2E%2E/escape.txt", "must not contain '..'"),
        ("%2Fetc%2Fpasswd", "must be relative"),
        ("a%5Cb.txt", "'/' as its separator"),
        ("/".join(["d"] * 20) + "/f.txt", "deeper than"),
    ],
)
def test_a_bad_path_is_400_naming_it_and_nothing_is_stored(host, path, problem):
    turn(host, "ws-c", "write file keep.txt: kept")
    before = workspace(host, "ws-c")
    response = put(host, "ws-c", path, b"evil")
    assert response.status == 400, (response.status, response.body)
    error = response.json()
    assert (error["error"], error["field"]) == ("invalid_path", "path")
    assert problem in error["message"]
    assert workspace(host, "ws-c") == before


def test_an_oversized_file_and_too_many_files_are_400_and_nothing_is_stored(host):
    turn(host, "ws-d", "write file keep.txt: kept")
    before = workspace(host, "ws-d")
    big = put(host, "ws-d", "big.bin", b"0" * 5000)
    assert big.status == 400
    assert big.json()["error"] == "workspace_limit"
    assert "big.bin: 5000 bytes" in big.json()["message"]
    for n in range(4):
        assert put(host, "ws-d", f"f{n}.txt", b"n").status == 201
    full = workspace(host, "ws-d")
    sixth = put(host, "ws-d", "f9.txt", b"n")
    assert sixth.status == 400
    assert "6 files, more than the 5 allowed" in sixth.json()["message"]
    assert workspace(host, "ws-d") == full
    assert len(before["files"]) == 1


def test_a_tool_that_breaks_the_limits_or_links_out_commits_nothing(host):
    turn(host, "ws-e", "write file keep.txt: kept")
    before = workspace(host, "ws-e")
    final = turn(
        host,
        "ws-e",
        "run python: import os\nos.symlink('/etc/passwd', 'leak') and then "
        "run python: open('big.bin', 'wb').write(b'0' * 5000)",
        "r2",
    )
    assert "run_python did not complete (workspace_limit)" in final["answer"]
    assert "leak: is a symbolic link" in final["answer"]
    assert "big.bin: 5000 bytes" in final["answer"]
    assert workspace(host, "ws-e") == before


def test_a_snippet_sees_none_of_the_apps_settings_and_runaways_stop_at_their_limits(host):
    final = turn(
        host,
        "ws-f",
        "run python: import os, json\nprint(json.dumps(sorted(os.environ))) and then "
        "run python: while True: pass and then "
        "run python: x = bytearray(2 * 1024 ** 3) and then "
        "run python: import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)",
    )
    lines = final["answer"].splitlines()
    names = json.loads(lines[0].removeprefix("Python printed: "))
    assert names == ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"]
    assert (
        lines[1] == "run_python did not complete (tool_error): run_python: stopped at its cpu limit"
    )
    assert (
        lines[2]
        == "run_python did not complete (tool_error): run_python: stopped at its memory limit"
    )
    assert lines[3].startswith("run_python did not complete (python_error)")
    assert "Network is unreachable" in lines[3] or "refused" in lines[3]


def test_bad_snapshot_ids_and_missing_files_and_sessions(host):
    turn(host, "ws-g", "write file a.txt: a")
    assert host.get("/api/sessions/ws-g/workspace?snapshot=nope").status == 400
    assert host.get("/api/sessions/ws-g/workspace?snapshot=" + "0" * 64).status == 404
    missing = host.get("/api/sessions/ws-g/workspace/files/none.txt")
    assert (missing.status, missing.json()["error"]) == (404, "file_not_found")
    assert host.get("/api/sessions/ws-nobody/workspace").status == 404
    assert put(host, "ws-nobody", "a.txt", b"a").status == 404
    quoted = urllib.parse.quote("a.txt")
    assert host.get(f"/api/sessions/ws-g/workspace/files/{quoted}").body == b"a"
