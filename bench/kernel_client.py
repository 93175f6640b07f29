"""What the kernel benchmarks need of the sessions API: submit, wait for the end, the run id.

Benchmarks drive a real host through ``durable_host.testing``; they never import the test
suite, so a change to the tests cannot change what a benchmark measures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from durable_host.testing import HostProcess, wait_for

FINAL = ("completed", "failed", "cancelled")


def kernel_env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The app's settings for a benchmark host: ledger and content in files under ``tmp``."""
    return {
        "AGENT_STATE_STORE": "file",
        "AGENT_CONTENT_DIR": str(tmp / "content"),
        "AGENT_LEDGER_DIR": str(tmp / "ledger"),
        "AGENT_TOOL_LEDGER_FILE": str(tmp / "tool-ledger.txt"),
        **(extra or {}),
    }


def submit(host: HostProcess, session: str, text: str, request_id: str = "r1") -> str:
    response = host.post(
        f"/api/sessions/{session}/submissions", {"requestId": request_id, "text": text}
    )
    if response.status != 202:
        raise RuntimeError(f"submit answered {response.status}: {response.body[:200]!r}")
    return str(response.json()["submissionId"])


def wait_final(host: HostProcess, session: str, sub: str, timeout: float = 30) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        view = host.get(f"/api/sessions/{session}/submissions/{sub}").json() or {}
        return view if view.get("status") in FINAL else None

    return wait_for(final, timeout, f"submission {sub} to finish", interval=0.05)


def run_id(session: str, sub: str) -> str:
    """The instance id of a submission's run orchestration."""
    return f"{session}:turn:{sub}:run"
