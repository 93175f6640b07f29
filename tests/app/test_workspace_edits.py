"""edit_file and delete_file, called by a model (the local chat-completions server, scripted):
one exact replacement, a refused ambiguous edit that commits nothing, a delete."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.turn_support import ModelServer, entries_of, submit, wait_final
from tests.harness import HostProcess


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


def call(n: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": f"edit_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def test_edits_and_deletes_commit_snapshots_and_an_ambiguous_edit_commits_nothing(
    fresh_kernel_host, model: ModelServer, tmp_path: Path
):
    host: HostProcess = fresh_kernel_host(
        {
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces"),
            "AGENT_WORKSPACE_STORE_DIR": str(tmp_path / "workspace-store"),
        }
    ).start()
    first = submit(host, "edits", "write file a.txt: one two two and then write file b.txt: bee")
    assert wait_final(host, "edits", first)["status"] == "completed"
    plan = [
        call(1, "edit_file", path="a.txt", old="one", new="ONE"),
        call(2, "edit_file", path="a.txt", old="two", new="2"),
        call(3, "delete_file", path="b.txt"),
    ]
    # One scripted call per round; then the planner answers the (tool-less) request.
    model.script = lambda messages: {"tool_calls": [plan.pop(0)]} if plan else None

    final = wait_final(host, "edits", submit(host, "edits", "tidy up", "r2"))

    assert final["status"] == "completed"
    outcomes = [(o["data"]["name"], o["data"]["ok"], o["data"]["kind"])
                for o in entries_of(host, "edits", "tool_outcome")][-3:]  # fmt: skip
    assert outcomes == [
        ("edit_file", True, None),
        ("edit_file", False, "edit_not_applied"),
        ("delete_file", True, None),
    ]
    listing = host.get("/api/sessions/edits/workspace").json()
    assert [f["path"] for f in listing["files"]] == ["a.txt"]
    assert host.get("/api/sessions/edits/workspace/files/a.txt").body == b"ONE two two"
    snapshots = host.get("/api/sessions/edits/workspace/snapshots").json()["snapshots"]
    assert [s["changed"] for s in snapshots] == [["b.txt"], ["a.txt"], ["b.txt"], ["a.txt"]]
