"""The workspace content collector on its schedule (``activities/workspace_collect.py``).

A host whose collector runs every two seconds with no grace: the file and snapshot of a
deleted session are collected, those of a live session stay and are still served. SQLite's
file store only: the sweep is the app's, the store's ``collect`` has its own tests
(``test_workspace_units.py``). Bounded polls only.
"""

from __future__ import annotations

from pathlib import Path

from activities.workspace_collect import sessions_of
from kernel.workspace import files as workspace
from tests.app.conftest import kernel_env
from tests.app.test_workspace import put, workspace_env
from tests.app.turn_support import submit, wait_final
from tests.harness import ROOT, HostProcess, store_spec_for, wait_for


def stored(root: Path, kind: str, key: str) -> bool:
    return (root / kind / key[:2] / key).is_file()


def test_a_deleted_sessions_content_is_collected_and_a_live_ones_stays(tmp_path: Path) -> None:
    env = kernel_env(tmp_path, workspace_env(tmp_path))
    env["AGENT_WORKSPACE_COLLECT_SCHEDULE"] = "*/2 * * * * *"
    env["AGENT_WORKSPACE_COLLECT_GRACE_S"] = "0"
    host = HostProcess(ROOT, store_spec_for("sqlite", tmp_path, "kernel"), env=env).start()
    try:
        root = tmp_path / "workspace-store"
        for session in ("wc-live", "wc-gone"):  # a session begins with a submission
            wait_final(host, session, submit(host, session, "hello"), timeout=90)
        kept = put(host, "wc-live", "keep.txt", b"kept content")
        gone = put(host, "wc-gone", "gone.txt", b"content of a session deleted")
        assert kept.status == 201 and gone.status == 201, (kept.body, gone.body)
        kept_hash = workspace.content_hash(b"kept content")
        gone_hash = workspace.content_hash(b"content of a session deleted")
        assert stored(root, "files", gone_hash) and stored(
            root, "snapshots", gone.json()["snapshot"]
        )

        assert host.request("DELETE", "/api/sessions/wc-gone").status == 200

        wait_for(lambda: not stored(root, "files", gone_hash), 60, "the collector ran")
        assert not stored(root, "snapshots", gone.json()["snapshot"])
        assert stored(root, "files", kept_hash)
        assert host.get("/api/sessions/wc-live/workspace/files/keep.txt").body == b"kept content"
    finally:
        host.kill()


def test_the_sessions_swept_are_those_of_turns_and_uploads() -> None:
    ids = [
        "s1:turn:abc",
        "s2:workspace:0123:1",
        "s1:turn:def",
        "@session@s3",
        "loop:s4:digest",
        "9f0e-submission:1:0",
    ]
    assert sessions_of(ids) == ["s1", "s2"]
