"""Record the golden histories of the turn's orchestrators from real runs on the durable host.

    python -m tests.replay.record     # rewrites tests/replay/histories/<defaultVersion>/*.json
    python -m tests.replay.record workspace   # only the workspace's histories

The corpus is per app version: instances are recorded at the version the app's host.json
deploys (``defaultVersion``), into ``histories/<that version>/``; the corpora of older
versions stay as they are (``unversioned/`` holds instances from before versions existed), so
CI keeps replaying every version that may still have running instances against today's code.

Each scenario runs on a fresh host with a SQLite store; the raw history of every instance of
interest is read from the store's ``history(instance_id, seq, event)`` table, exactly as the
host replays it, and written with the instance's name, parent and output. See docs/testing.md.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel.common import ids
from services.mailbox.testing import start_mailbox, stop_mailbox
from tests.app.responses_server import ResponsesServer
from tests.app.turn_support import (
    ModelServer,
    run_id,
    submit,
    turn_env,
    wait_final,
    wait_phase,
)
from tests.harness import ROOT, WEBHOOK, HostProcess

HISTORIES = Path(__file__).resolve().parent / "histories"


def app_version() -> str:
    """The version the app deploys: host.json ``defaultVersion`` ("" when it names none)."""
    durable = json.loads((ROOT / "host.json").read_text())["extensions"]["durableTask"]
    return str(durable.get("defaultVersion") or "")


def corpus_dir(version: str) -> Path:
    return HISTORIES / (version or "unversioned")


Recorder = Callable[[HostProcess, ModelServer], dict[str, str]]


def tools_turn(host: HostProcess, model: ModelServer) -> dict[str, str]:
    sub = submit(
        host, "golden-tools", "calculate 2+3 and then remember plan: buy milk and then recall plan"
    )
    wait_final(host, "golden-tools", sub)
    run = run_id("golden-tools", sub)
    return {
        "agent_turn.tools": ids.turn_instance_id("golden-tools", sub),
        "agent_run.tools": run,
        "agent_round.tool_round": f"{run}:round-1",
        "agent_round.answer": f"{run}:round-4",
        "tool_task.calculator": ids.tool_task_id(sub, 1, 0),
        "tool_task.write_document": ids.tool_task_id(sub, 2, 0),
    }


def approval(host: HostProcess, model: ModelServer) -> dict[str, str]:
    sub = submit(host, "golden-approval", "remember old: eggs and then delete document old")
    task = ids.tool_task_id(sub, 2, 0)
    wait_phase(host, task, "approval")
    host.post(
        f"/api/sessions/golden-approval/approvals/{task}",
        {"requestId": "a1", "decision": "approve"},
    )
    wait_final(host, "golden-approval", sub)
    return {"tool_task.approval": task}


def rate_limited(host: HostProcess, model: ModelServer) -> dict[str, str]:
    refused: list[bool] = []

    def once(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        if refused:
            return None
        refused.append(True)
        return {"status": 429, "headers": {"Retry-After": "0.2"}}

    model.script = once
    sub = submit(host, "golden-retry", "what is 2+2")
    wait_final(host, "golden-retry", sub)
    return {"agent_round.retry": f"{run_id('golden-retry', sub)}:round-1"}


def attention(host: HostProcess, model: ModelServer) -> dict[str, str]:
    outage = {"on": True}
    model.script = lambda messages: {"status": 503} if outage["on"] and len(messages) > 1 else None
    sub = submit(host, "golden-attention", "calculate 1+1 and then calculate 2+2")
    run = run_id("golden-attention", sub)
    wait_phase(host, run, "needs_attention")
    outage["on"] = False
    host.post(
        f"/api/sessions/golden-attention/submissions/{sub}/operator",
        {"requestId": "o1", "action": "retry"},
    )
    wait_final(host, "golden-attention", sub)
    return {"agent_run.attention": run, "agent_round.parked": f"{run}:round-2"}


def slot_wait(host: HostProcess, model: ModelServer) -> dict[str, str]:
    model.script = None
    held = model.hold()
    first = submit(host, "golden-slot-a", "what is 3+3")
    held.arrived.wait(20)
    second = submit(host, "golden-slot-b", "what is 4+4")
    round_b = f"{run_id('golden-slot-b', second)}:round-1"
    wait_phase(host, round_b, "waiting")
    held.release()
    wait_final(host, "golden-slot-a", first)
    wait_final(host, "golden-slot-b", second)
    return {"agent_round.slot_wait": round_b}


def notices(host: HostProcess, model: ModelServer) -> dict[str, str]:
    """The notices workflow to two recipients through the real mailbox, one rejected."""
    created = host.post(
        "/api/sessions/golden-notices/submissions", {"requestId": "setup", "text": "hello"}
    ).json()
    host.wait_for_status(created["instanceId"], timeout=60)
    parent = ids.child_task_id(created["instanceId"], "notices")
    job = {
        "session_id": "golden-notices",
        "submission_id": created["submissionId"],
        "tool_task_id": created["instanceId"],
        "recipients": ["ana@example.com", "blocked@example.com"],
        "subject": "Q3 update",
        "body": "Your plan changes on May 1.",
        "settings": {"confirm_interval_s": 0.2, "retry_backoff_s": 0.1, "cancel_grace_s": 5},
    }
    host.start_orchestration("send_notices", job, parent)
    host.wait_for_status(parent, timeout=60)
    return {
        "send_notices.settled": parent,
        "send_notice.confirmed": f"{parent}:mail-1",
        "send_notice.rejected": f"{parent}:mail-2",
    }


OFFLINE: list[Recorder] = [tools_turn, approval]
WITH_MODEL: list[Recorder] = [rate_limited, attention, slot_wait]


GOLDEN_SKILL = {
    "name": "golden-skill",
    "inputs": ["who"],
    "steps": [
        {"id": "gate", "kind": "approval", "timeoutS": 600},
        {"id": "form", "kind": "event", "event": "signed", "timeoutS": 600},
        {
            "id": "both",
            "kind": "join",
            "steps": [
                {
                    "id": "priced",
                    "kind": "sequence",
                    "steps": [
                        {
                            "id": "fee",
                            "kind": "tool",
                            "tool": "calculator",
                            "arguments": {"expression": "${steps.form.seats} * 12"},
                        },
                        {"id": "settle", "kind": "timer", "seconds": 0.1},
                    ],
                },
                {"id": "pause", "kind": "timer", "seconds": 0.2},
            ],
        },
        {"id": "note", "kind": "model", "prompt": "welcome ${input.who}"},
        {
            "id": "welcome",
            "kind": "tool",
            "tool": "calculator",
            "arguments": {"expression": "${steps.fee.value} + 1"},
        },
    ],
}


def skill(host: HostProcess, model: ModelServer) -> dict[str, str]:
    """A skill run through every step kind: approval, event, join (a sequence of a tool and a
    timer; a timer), model, tool."""
    json_request(f"{host.base_url}/api/skills", GOLDEN_SKILL)
    run = json_request(
        f"{host.base_url}/api/skills/golden-skill/runs", {"requestId": "r1", "input": {"who": "A"}}
    )
    url = f"{host.base_url}/api/skills/golden-skill/runs/{run['runId']}"
    wait_phase(host, run["instanceId"], "approval")
    json_request(f"{url}/approvals/gate", {"requestId": "a1", "decision": "approve"})
    wait_phase(host, run["instanceId"], "waiting")
    json_request(f"{url}/events/signed", {"payload": {"seats": 2}})
    host.wait_for_status(run["instanceId"], timeout=60)
    return {
        "skill_run.all_kinds": run["instanceId"],
        "skill_run.branch": f"{run['instanceId']}:priced",
    }


def export(db: Path, instance_id: str) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        name, output, parent = conn.execute(
            "SELECT name, output, parent_instance_id FROM instances WHERE instance_id = ?",
            (instance_id,),
        ).fetchone()
        events = [
            json.loads(row[0])
            for row in conn.execute(
                "SELECT event FROM history WHERE instance_id = ? ORDER BY seq", (instance_id,)
            )
        ]
    return {
        "orchestrator": name,
        "instance_id": instance_id,
        "parent_instance_id": parent,
        "output": json.loads(output) if output else None,
        "events": events,
    }


def run(
    recorders: list[Recorder], model: ModelServer, env: dict[str, str], tmp: Path, out: Path
) -> int:
    host = HostProcess(ROOT, f"sqlite:{tmp / 'golden.db'}", env=turn_env(tmp, env)).start()
    try:
        for recorder in recorders:
            for label, instance_id in recorder(host, model).items():
                recorded = export(tmp / "golden.db", instance_id)
                text = json.dumps(recorded, indent=1, sort_keys=True)
                if str(tmp) in text:
                    raise SystemExit(f"{label}: the history names a machine path; not written")
                (out / f"{label}.json").write_text(text + "\n")
                print(f"{label}: {len(recorded['events'])} events")
    finally:
        host.kill()
    return 0


def record_notices(model: ModelServer, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mailbox, base_url = start_mailbox(Path(tmp) / "mailbox.db")
        try:
            json_request(f"{base_url}/control", {"reject": ["blocked@example.com"]})
            run([notices], model, {"AGENT_MAIL_BASE_URL": base_url}, Path(tmp), out)
        finally:
            stop_mailbox(mailbox)


def record_background(model: ModelServer, out: Path) -> None:
    """Background model calls (``AGENT_MODEL_BASE_URL`` a local Responses server)."""
    server = ResponsesServer().start()

    def answered(host: HostProcess, model: ModelServer) -> dict[str, str]:
        sub = submit(host, "golden-background", "what is 5+5")
        wait_final(host, "golden-background", sub)
        return {"agent_round.background": f"{run_id('golden-background', sub)}:round-1"}

    def cancelled(host: HostProcess, model: ModelServer) -> dict[str, str]:
        held = server.hold()
        sub = submit(host, "golden-bg-cancel", "hello there")
        held.polled.wait(20)
        host.post(
            f"{WEBHOOK}/entities/session/golden-bg-cancel?op=cancel",
            {"submission_id": sub, "reason": "golden"},
        )
        wait_final(host, "golden-bg-cancel", sub)
        held.release()
        return {"agent_round.background_cancel": f"{run_id('golden-bg-cancel', sub)}:round-1"}

    env = {
        "AGENT_MODEL_BASE_URL": server.base_url,
        "AGENT_MODEL_BACKGROUND": "1",
        "AGENT_MODEL_POLL_S": "0.1",
        "AGENT_MODEL_MAX_POLL_S": "0.2",
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run([answered, cancelled], model, env, Path(tmp), out)
    finally:
        server.stop()


def json_request(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def workspace_turn(host: HostProcess, model: ModelServer) -> dict[str, str]:
    """The workspace tools, an upload's commit, and a run that records its environment and
    checks it before each round after the first (docs/workspace.md)."""
    sub = submit(
        host,
        "golden-workspace",
        "write file report.md: golden and then run python: print(open('report.md').read())",
    )
    wait_final(host, "golden-workspace", sub)
    uploaded = host.request(
        "PUT",
        "/api/sessions/golden-workspace/workspace/files/input.txt",
        raw=b"input",
        headers={"Content-Type": "application/octet-stream"},
    ).json()
    return {
        "agent_run.environment": run_id("golden-workspace", sub),
        "tool_task.write_file": ids.tool_task_id(sub, 1, 0),
        "tool_task.run_python": ids.tool_task_id(sub, 2, 0),
        "workspace_commit.upload": uploaded["task"].removeprefix("upload:"),
    }


def record_workspace(model: ModelServer, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "AGENT_WORKSPACE_DIR": str(Path(tmp) / "workspaces"),
            "AGENT_WORKSPACE_STORE_DIR": str(Path(tmp) / "workspace-store"),
        }
        run([workspace_turn], model, env, Path(tmp), out)


def record_skills(model: ModelServer, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run([skill], model, {"AGENT_SKILLS_DIR": str(Path(tmp) / "skills")}, Path(tmp), out)


def main() -> int:
    out = corpus_dir(app_version())
    out.mkdir(parents=True, exist_ok=True)
    print(f"recording the corpus of version {app_version() or '(none)'} into {out.name}/")
    model = ModelServer().start()
    if sys.argv[1:] == ["workspace"]:  # only the workspace's histories, the rest as they are
        try:
            record_workspace(model, out)
        finally:
            model.stop()
        return 0
    try:
        with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
            run(OFFLINE, model, {}, Path(first), out)
            run(
                WITH_MODEL,
                model,
                {
                    "AGENT_MODEL_BASE_URL": model.base_url,
                    "AGENT_MAX_MODEL_ATTEMPTS": "2",
                    "AGENT_BASE_BACKOFF_S": "0",
                    "AGENT_MAX_CONCURRENT_MODEL_CALLS": "1",
                },
                Path(second),
                out,
            )
        record_notices(model, out)
        record_background(model, out)
        record_skills(model, out)
        record_workspace(model, out)
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
