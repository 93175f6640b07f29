"""The workspace's pure rules, its store (files), rehydration and the environment policy."""

from __future__ import annotations

import os
import time

import pytest

from adapters import workspace_local
from adapters.workspace_store import WorkspaceMissing, WorkspaceStore, _FileObjects
from kernel.workspace import environment
from kernel.workspace import files as workspace


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("a.txt", "a.txt"), ("./a//b/./c.txt", "a/b/c.txt"), ("dir/file", "dir/file")],
)
def test_paths_are_normalised(raw, expected):
    assert workspace.normalize_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "non-empty"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("/etc/passwd", "absolute"),
        ("C:/x", "absolute"),
        ("a\\b", "separator"),
        ("a\x00b", "control"),
        (".", "names no file"),
        ("x" * 300, "longer than"),
        ("/".join("d" * 17), "deeper than"),
    ],
)
def test_bad_paths_name_their_problem(raw, problem):
    with pytest.raises(workspace.PathProblem, match=problem):
        workspace.normalize_path(raw)


def test_limits_diff_and_who_changed_what():
    files = {
        "a": {"hash": "1", "size": 10, "mode": 420},
        "b": {"hash": "2", "size": 5, "mode": 420},
    }
    limits = workspace.Limits(max_file_bytes=8, max_files=1, max_total_bytes=12)
    assert workspace.limit_problems(files, limits) == [
        "a: 10 bytes, more than the 8 a file may hold",
        "workspace: 2 files, more than the 1 allowed",
        "workspace: 15 bytes in all, more than the 12 allowed",
    ]
    newer = {"a": {"hash": "9", "size": 1, "mode": 420}, "c": {"hash": "3", "size": 1, "mode": 420}}
    assert workspace.diff(files, newer) == {"added": ["c"], "changed": ["a"], "deleted": ["b"]}
    chain = [
        {"files": newer, "changed": ["a", "b", "c"], "task": "t2"},
        {"files": files, "changed": ["a", "b"], "task": "t1"},
    ]
    assert workspace.changed_by(chain) == {"a": "t2", "c": "t2"}


def test_the_store_keeps_each_content_once_verifies_it_and_prunes_and_collects(tmp_path):
    store = WorkspaceStore(_FileObjects(tmp_path))
    digest = store.put_file(b"hello")
    assert store.put_file(b"hello") == digest
    assert len(list((tmp_path / "files").rglob("*"))) == 2  # one directory, one file
    (tmp_path / "files" / digest[:2] / digest).write_bytes(b"tampered")
    with pytest.raises(WorkspaceMissing):
        store.get_file(digest)

    heads: list[str | None] = [None]
    for n in range(4):
        data = f"v{n}".encode()
        files = {"f": {"hash": store.put_file(data), "size": len(data), "mode": 420}}
        snapshot = workspace.make_snapshot(
            files, parent=heads[-1], parent_files={}, task=f"t{n}", at="now"
        )
        heads.append(store.put_snapshot(snapshot))
    assert [s["task"] for s in store.chain(heads[-1])] == ["t3", "t2", "t1", "t0"]
    assert store.prune(heads[-1], keep=2) == 2
    assert [s["task"] for s in store.chain(heads[-1])] == ["t3", "t2"]
    deleted = store.collect([heads[-1]], keep=50, grace_s=0)
    assert deleted == {"snapshots": 0, "files": 3}  # "hello", v0 and v1: no live chain names them
    assert store.get_file(workspace.content_hash(b"v3")) == b"v3"


def test_rehydration_makes_the_directory_equal_to_the_snapshot(tmp_path):
    store = WorkspaceStore(_FileObjects(tmp_path / "store"))
    files = {
        "keep.txt": {"hash": store.put_file(b"keep"), "size": 4, "mode": 0o644},
        "bin/run.sh": {"hash": store.put_file(b"#!/bin/sh"), "size": 9, "mode": 0o755},
    }
    local = tmp_path / "local"
    (local / "bin").mkdir(parents=True)
    (local / "keep.txt").write_text("stale")
    (local / "junk" / "deep").mkdir(parents=True)
    (local / "junk" / "deep" / "x").write_text("uncommitted")
    os.symlink("/etc/passwd", local / "leak")

    changed = workspace_local.rehydrate(local, files, store)

    assert changed == {
        "written": ["bin/run.sh", "keep.txt"],
        "removed": ["junk/deep/x", "leak"],
    }
    scanned, problems = workspace_local.scan(local)
    assert (scanned, problems) == (files, [])
    assert sorted(p.name for p in local.iterdir()) == ["bin", "keep.txt"]
    assert workspace_local.rehydrate(local, files, store) == {"written": [], "removed": []}


def test_the_environment_policy():
    a = {"app": "1.0", "schema": 4, "dependencies": "d", "model": "p:a", "tools": "t"}
    b = {**a, "model": "p:b"}
    c = {**b, "tools": "u"}
    assert environment.decide(a, a, "strict").ok
    strict = environment.decide(a, b, "strict")
    assert (strict.ok, strict.changed) == (False, ("model",))
    assert strict.reason == (
        "environment_changed: model: p:a -> p:b (AGENT_ENVIRONMENT_POLICY=strict refuses it)"
    )
    assert environment.decide(a, b, "model-may-change").ok
    mixed = environment.decide(a, c, "model-may-change")
    assert (mixed.ok, mixed.changed, mixed.allowed) == (False, ("tools",), ("model",))
    assert environment.decide(a, c, "off").ok
    assert not environment.decide(a, a, "lenient").ok  # an unknown policy never reads as off
    assert environment.policy_of(None) == "strict" == environment.policy_of(" STRICT ")


def test_collect_spares_what_is_younger_than_its_grace(tmp_path):
    store = WorkspaceStore(_FileObjects(tmp_path))
    store.put_file(b"just stored by a tool that has not committed")
    assert store.collect([], grace_s=3600) == {"snapshots": 0, "files": 0}
    time.sleep(0.01)
    assert store.collect([], grace_s=0) == {"snapshots": 0, "files": 1}
