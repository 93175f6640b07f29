"""Kill -9 a host in every window of a turn, restart it, and check what was done again.

The model is the local chat-completions server, so every model call is counted where it is
paid for. A turn of one tool has two model rounds: a transcript of 1 message (round 1) and of
3 messages (round 2, after the tool result). Activities of that turn run in this order:
``turn_limits`` (1), ``call_model`` (2), ``execute_tool`` (3), ``call_model`` (4).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.turn_support import ModelServer, entries_of, submit, view, wait_final
from tests.harness import HostProcess

pytestmark = pytest.mark.crash
ONE_CALL_PER_ROUND = {1: 1, 3: 1}


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def crashing(fresh_kernel_host, model: ModelServer, tmp_path: Path) -> Callable[..., HostProcess]:
    def factory(**extra: str) -> HostProcess:
        return fresh_kernel_host(
            {
                "AGENT_MODEL_BASE_URL": model.base_url,
                "AGENT_LEDGER_DIR": str(tmp_path / "ledger"),
                "AGENT_TOOL_LEDGER_FILE": str(tmp_path / "tool-ledger.txt"),
                "AGENT_TOOL_LEASE_S": "0.5",
                "AGENT_LEDGER_CONTAINER": ledger_container(tmp_path),  # used on Azure only
                **extra,
            }
        )

    return factory


def crash_then_finish(host: HostProcess, text: str, faults: str | None = None) -> tuple[str, dict]:
    host.start(faults=faults)
    sub = submit(host, "crash", text)
    assert host.wait_exit(60) != 0, "the fault point was not reached"
    host.env.pop("KERNEL_FAULTS", None)
    host.start()
    return sub, wait_final(host, "crash", sub)


def outcomes(host: HostProcess) -> list[dict]:
    return [e["data"] for e in entries_of(host, "crash", "tool_outcome")]


def test_kill_during_the_model_call_asks_again_only_what_was_never_answered(crashing, model):
    host = crashing().start()
    held = model.hold()
    sub = submit(host, "crash", "calculate 2+3")
    assert held.arrived.wait(60)
    host.kill()
    held.release()

    host.start()
    final = wait_final(host, "crash", sub)

    assert final["answer"] == "2+3 = 5"
    assert model.calls_by_length() == {1: 2, 3: 1}  # the lost call again; nothing committed again


def test_kill_after_the_model_answered_reuses_the_saved_reply(crashing, model):
    _, final = crash_then_finish(crashing(), "calculate 2+3", "activity.before_complete@2")

    assert final["answer"] == "2+3 = 5"
    assert model.calls_by_length() == ONE_CALL_PER_ROUND


def test_kill_after_the_response_was_committed_before_the_tool_ran(crashing, model):
    host = crashing()
    _, final = crash_then_finish(host, "calculate 2+3", "activity.start@3")

    assert final["answer"] == "2+3 = 5"
    assert model.calls_by_length() == ONE_CALL_PER_ROUND
    assert [o["runs"] for o in outcomes(host)] == [1]


def test_kill_inside_a_safe_tool_runs_it_again(crashing, model):
    host = crashing(KERNEL_FAULTS="tool.after_effect@1")
    _, final = crash_then_finish(host, "calculate 2+3")

    assert final["answer"] == "2+3 = 5"
    assert [(o["name"], o["ok"], o["runs"]) for o in outcomes(host)] == [("calculator", True, 2)]
    assert model.calls_by_length() == ONE_CALL_PER_ROUND


def ledger_container(tmp_path: Path) -> str:
    """A ledger container of the test's own: submission ids repeat from test to test."""
    return "ledger-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]


def ledger_records(tmp_path: Path, store_kind: str, sub: str) -> tuple[list[str], list[str]]:
    """The submission's attempt records: (files in the ledger dir, blobs in its container)."""
    folder = tmp_path / "ledger"
    names = [p.name for p in folder.glob("*.json")] if folder.exists() else []
    files = [n for n in names if sub in urllib.parse.unquote(n)]
    if store_kind != "azure":
        return files, []
    from azure.storage.blob import ContainerClient

    container = ContainerClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], ledger_container(tmp_path)
    )
    blobs = [b.name for b in container.list_blobs() if sub in urllib.parse.unquote(b.name)]
    return files, blobs


def test_kill_inside_an_unsafe_tool_reports_it_interrupted(crashing, model, tmp_path, store_kind):
    host = crashing(KERNEL_FAULTS="tool.after_effect@1")
    sub, final = crash_then_finish(host, "ledger: paid 5 EUR")

    assert final["status"] == "completed"
    assert final["answer"].startswith("append_ledger did not complete (interrupted)")
    assert (tmp_path / "tool-ledger.txt").read_text().splitlines() == ["paid 5 EUR"]  # once
    task = view(host, "crash")["tasks"][ids.tool_task_id(sub, 1, 0)]
    assert (task["status"], task["phase"]) == ("interrupted", "applied")
    assert model.calls_by_length() == ONE_CALL_PER_ROUND
    # The records of both model calls and the tool: in blobs on Azure, in files on SQLite.
    files, blobs = ledger_records(tmp_path, store_kind, sub)
    assert (len(files), len(blobs)) == ((0, 3) if store_kind == "azure" else (3, 0))


def test_kill_between_tool_completed_and_result_applied(crashing, model):
    # The 9th entity commit of this turn is "tool completed" (the session's 4th entry).
    host = crashing()
    _, final = crash_then_finish(host, "calculate 2+3", "entity.after_commit@9")

    assert final["answer"] == "2+3 = 5"
    tool_entries = [
        (e["kind"], json.dumps(e["data"].get("result")))
        for e in entries_of(host, "crash")
        if e["role"] == "tool"
    ]
    assert [kind for kind, _ in tool_entries] == ["tool_intent", "tool_outcome", "message"]
    assert [o["runs"] for o in outcomes(host)] == [1]
    assert model.calls_by_length() == ONE_CALL_PER_ROUND
