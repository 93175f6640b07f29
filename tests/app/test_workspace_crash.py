"""The workspace survives its host: a SIGKILL during run_python, a deleted local directory, and
a second host on a fresh copy of the app that shares only the Azure storage.

After a crash the workspace is the last committed snapshot plus exactly what the re-run
committed (run_python is ``safe``: its host rehydrates the directory before the re-run).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.conftest import kernel_env
from tests.app.turn_support import entries_of, submit, wait_final
from tests.harness import ROOT, HostProcess, store_spec_for, store_specs, wait_for

# A SIGKILL, restarts and (on Azure) a second host: more than the suite's 120 s on a busy machine.
pytestmark = [pytest.mark.crash, pytest.mark.timeout(300)]


@pytest.fixture
def ws_host(fresh_kernel_host, tmp_path: Path) -> Callable[..., HostProcess]:
    def factory(**extra: str) -> HostProcess:
        return fresh_kernel_host(
            {
                "AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces"),
                "AGENT_WORKSPACE_STORE_DIR": str(tmp_path / "workspace-store"),
                "AGENT_TOOL_LEASE_S": "0.5",
                **extra,
            }
        )

    return factory


def files_of(host: HostProcess, session: str) -> dict[str, bytes]:
    listing = host.get(f"/api/sessions/{session}/workspace").json()
    return {
        f["path"]: host.get(f"/api/sessions/{session}/workspace/files/{f['path']}").body
        for f in listing["files"]
    }


def test_a_kill_during_run_python_leaves_the_committed_snapshot_plus_what_the_rerun_committed(
    ws_host, tmp_path
):
    host = ws_host().start()
    final = wait_final(host, "crash-ws", submit(host, "crash-ws", "write file base.txt: base"))
    assert final["status"] == "completed"
    marker = tmp_path / "snippet-started"
    code = (
        "import os, time\n"
        f"first = not os.path.exists({str(marker)!r})\n"
        "open('base.txt', 'w').write('half')\n"
        "open('out.txt', 'w').write('partial')\n"
        "if first:\n"
        # The marker last: once the test sees it, everything before it is on disk.
        "    open('junk.txt', 'w').write('left by the killed run')\n"
        f"    open({str(marker)!r}, 'w').write('x')\n"
        "    time.sleep(120)\n"
        "open('base.txt', 'w').write('changed')\n"
        "open('out.txt', 'w').write('complete')\n"
        "print('finished')"
    )
    sub = submit(host, "crash-ws", f"run python: {code}", "r2")
    wait_for(lambda: marker.exists() or None, 60, "the snippet to start")
    local = tmp_path / "workspaces" / "crash-ws"
    assert (local / "junk.txt").exists()  # the uncommitted state of the killed attempt
    host.kill()
    time.sleep(1)  # the lease of the killed attempt (0.5 s) runs out
    assert (local / "junk.txt").read_text() == "left by the killed run"  # nobody touched it

    host.start()
    final = wait_final(host, "crash-ws", sub, timeout=120)

    assert final["status"] == "completed", final
    assert final["answer"] == "Python printed: finished"
    assert files_of(host, "crash-ws") == {"base.txt": b"changed", "out.txt": b"complete"}
    outcome = [e["data"] for e in entries_of(host, "crash-ws", "tool_outcome")][-1]
    assert (outcome["name"], outcome["ok"], outcome["runs"]) == ("run_python", True, 2)
    assert sorted(p.name for p in local.iterdir()) == ["base.txt", "out.txt"]
    snapshots = host.get("/api/sessions/crash-ws/workspace/snapshots").json()["snapshots"]
    assert [s["changed"] for s in snapshots] == [["base.txt", "out.txt"], ["base.txt"]]
    assert snapshots[0]["task"] == ids.tool_task_id(sub, 1, 0)


def test_a_deleted_local_directory_is_rehydrated_for_the_next_tool(ws_host, tmp_path):
    host = ws_host().start()
    first = submit(host, "lost-dir", "write file data/a.txt: alpha and then write file b.txt: beta")
    assert wait_final(host, "lost-dir", first)["status"] == "completed"
    shutil.rmtree(tmp_path / "workspaces")

    code = "import pathlib\nprint(sorted(str(p) for p in pathlib.Path('.').rglob('*.txt')), open('data/a.txt').read())"
    final = wait_final(host, "lost-dir", submit(host, "lost-dir", f"run python: {code}", "r2"))

    assert final["answer"] == "Python printed: ['b.txt', 'data/a.txt'] alpha"


@pytest.mark.skipif("azure" not in store_specs(), reason="DURABLE_TEST_STORES leaves azure out")
def test_a_second_host_on_a_fresh_copy_sees_the_same_files_from_blobs(request, tmp_path):
    from tests.conftest import azure_env

    shared = {
        **azure_env(request, "copy"),
        "AGENT_WORKSPACE_CONTAINER": "ws-copy-" + tmp_path.name[-8:].lower().replace("_", ""),
    }
    first_dir = tmp_path / "first"
    first = HostProcess(
        ROOT,
        store_spec_for("azure", first_dir, "kernel"),
        env=kernel_env(
            first_dir, {**shared, "AGENT_WORKSPACE_DIR": str(first_dir / "ws")}, "azure"
        ),
    )
    first.start()
    try:
        sub = submit(first, "copy", "write file report.md: made on the first host")
        assert wait_final(first, "copy", sub)["status"] == "completed"
    finally:
        first.stop()

    copy = tmp_path / "app-copy"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "node_modules", ".durable", "__pycache__", "tests", "bench", "docs"
        ),
    )
    second_dir = tmp_path / "second"
    second = HostProcess(
        copy,
        store_spec_for("azure", second_dir, "kernel"),
        env=kernel_env(
            second_dir, {**shared, "AGENT_WORKSPACE_DIR": str(second_dir / "ws")}, "azure"
        ),
    )
    second.start()
    try:
        assert files_of(second, "copy") == {"report.md": b"made on the first host"}
        sub = submit(second, "copy", "run python: print(open('report.md').read())", "r2")
        final = wait_final(second, "copy", sub)
    finally:
        second.kill()

    assert final["answer"] == "Python printed: made on the first host"
    assert (second_dir / "ws" / "copy" / "report.md").read_text() == "made on the first host"
