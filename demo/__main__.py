"""``python -m demo``: start the mail service and the durable host, submit one request, and
show its progress live from the session's change stream.

The request exercises the whole kernel: a calculator round, a document write, and the
five-notices workflow against the real mail service. Then a skill (``docs/skills.md``) is
registered through the API and run (after a submission that calls a tool of an MCP server,
the reference time server over stdio: docs/tools.md): a tool step, a wait for an event (raised by the demo), a
join of a calculation and a timer, and a closing tool step, each shown as the run reaches it.
Progress lines come from ``GET /api/sessions/{id}/changes?after=&wait=&previews=`` (long
polling on the committed change log), so what you see is exactly what was made durable, in
order - and, marked ``preview``, the answer as the model streams it and the tools while they
run: previews (``AGENT_PREVIEWS=on``; the offline planner streams word by word), shown as they
arrive and never recorded. ``--exit`` stops when the
submission is final (used by tests); otherwise the host keeps serving until Ctrl-C, and the
session page stays open at the printed URL.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REQUEST = (
    "calculate (17 + 25) * 2 and then remember launch: ship on Friday and then "
    "send the approved notice to alice@example.com, bob@example.com, carol@example.com, "
    'dave@example.com, erin@example.com subject "Service window"'
)
# An MCP server's tool (docs/tools.md): the reference time server, spawned over stdio.
MCP_REQUEST = (
    'call mcp__time__convert_time with {"source_timezone": "UTC", "time": "12:00", '
    '"target_timezone": "Asia/Tokyo"}'
)
MCP_SERVERS = {
    "mcpServers": {
        "time": {
            "command": str(Path(sys.executable).parent / "mcp-server-time"),
            "args": ["--local-timezone", "UTC"],
        }
    }
}
# The workspace (docs/workspace.md): a report file, and a computation over it in run_python.
WORKSPACE_REQUEST = (
    "write file report.md: # Service window\nNotices sent: 5\nConfirmed: 5 and then "
    "run python: lines = open('report.md').read().splitlines()\n"
    "numbers = [int(line.split(': ')[1]) for line in lines if ': ' in line]\n"
    "open('stats.txt', 'w').write(f'confirmation rate: {numbers[1] / numbers[0]:.0%}')\n"
    "print('numbers in the report:', numbers, 'total', sum(numbers)) and then list files"
)
FINAL = ("completed", "failed", "cancelled")
SKILL = {
    "name": "onboard-customer",
    "description": "Open the account, wait for the signed form, price the seats, welcome.",
    "inputs": ["customer"],
    "steps": [
        {
            "id": "account",
            "kind": "tool",
            "tool": "append_ledger",
            "arguments": {"text": "account opened for ${input.customer}"},
        },
        {"id": "form", "kind": "event", "event": "signed_form", "timeoutS": 3600},
        {
            "id": "checks",
            "kind": "join",
            "mode": "allSettled",
            "steps": [
                {
                    "id": "fee",
                    "kind": "tool",
                    "tool": "calculator",
                    "arguments": {"expression": "${steps.form.seats} * 12"},
                    "retry": {"maxAttempts": 3, "firstRetryS": 1},
                },
                {"id": "cooling", "kind": "timer", "seconds": 1},
            ],
        },
        {
            "id": "welcome",
            "kind": "tool",
            "tool": "append_ledger",
            "arguments": {
                "text": "welcome ${input.customer}: ${steps.form.seats} seats, fee ${steps.fee.value}"
            },
        },
    ],
}


def http(method: str, url: str, body: Any = None, timeout: float = 70.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


def spawn(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start a child process that prints one ``... listening on URL`` line; return it and URL."""
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line:
            return proc, line.strip().rsplit(" ", 1)[-1]
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"{args[2]} did not start")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def task_label(task_id: str) -> str:
    """What follows the submission id: ``turn``, ``run:round-2``, ``tool:3:0:notices:mail-4``."""
    match = _UUID.search(task_id)
    rest = task_id[match.end() :].lstrip(":") if match else task_id
    return rest or "turn"


def entry_text(entry: dict[str, Any]) -> str:
    data = entry.get("data") or {}
    calls = data.get("tool_calls") or []
    if calls:
        return "asks for " + ", ".join(c["name"] for c in calls)
    kind = entry.get("kind")
    if kind == "tool_intent":
        return f"intent: {data.get('name')} {json.dumps(data.get('arguments', {}))} ({data.get('policy')})"
    if kind == "tool_outcome":
        return f"completed: {data.get('name')} ok={data.get('ok')} runs={data.get('runs')}"
    text = (entry.get("text") or "").strip()
    if not text and "result" in data:
        text = f"result of {data.get('name')}: {json.dumps(data['result'])}"
    first, _, more = text.partition("\n")
    return first[:80] + (" ..." if more or len(first) > 80 else "")


def describe(item: dict[str, Any], view: dict[str, Any]) -> str | None:
    kind = item.get("type")
    if kind == "entry":
        entry: dict[str, Any] = next(
            (e for e in view.get("entries", []) if e["n"] == item["n"]), {}
        )
        label = f"{item['role']}/{item.get('kind') or 'message'}"
        return f"  entry #{item['n']:<3} {label:<22} {entry_text(entry)}"
    if kind == "task":
        return f"  task   {task_label(item['id']):<34} {item.get('status') or '':<11} {item.get('phase') or ''}"
    if kind == "document":
        return f"  doc    {item['id'][:34]:<34} v{item['version']} ({item['doc_type']})"
    if kind == "submission":
        return f"  submission {item['id'][:8]}... {item['status']}"
    return None


def describe_preview(preview: dict[str, Any]) -> str:
    """One line for a preview: where it is and the end of its text so far."""
    text = " / ".join(line.strip() for line in preview["text"].splitlines() if line.strip())
    text = text if len(text) <= 70 else "..." + text[-67:]
    what = "streaming" if preview["kind"] == "model_text" else "running"
    return f"  preview {task_label(preview['task']):<33} {what:<11} {text}"


def follow(base: str, session_id: str, submission_id: str, deadline: float) -> dict[str, Any]:
    cursor, tag, shown = 0, "", ""
    while time.monotonic() < deadline:
        status, page = http(
            "GET",
            f"{base}/api/sessions/{session_id}/changes?after={cursor}&wait=20&previews={tag}",
        )
        if status == 404:
            time.sleep(0.1)  # the session entity is created by the first commit
            continue
        if status != 200:
            raise SystemExit(f"change stream failed: {status} {page}")
        records = page.get("changes", page) if isinstance(page, dict) else page
        tag = page.get("previewTag", "")
        if records:
            _, view = http("GET", f"{base}/api/sessions/{session_id}")
            for record in records:
                for item in record.get("items", []):
                    line = describe(item, view)
                    if line:
                        print(line, flush=True)
                cursor = record["cursor"]
        for preview in page.get("previews", []):  # after the records they were judged against
            line = describe_preview(preview)
            if line != shown:  # the text grew (or another task reports)
                print(line, flush=True)
                shown = line
        _, sub = http("GET", f"{base}/api/sessions/{session_id}/submissions/{submission_id}")
        if sub and sub.get("status") in FINAL:
            return sub
    raise SystemExit("the demo did not finish in time")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m demo")
    parser.add_argument("--port", type=int, default=7071)
    parser.add_argument("--exit", action="store_true", help="stop once the submission is final")
    parser.add_argument("--state-dir", default=str(ROOT / ".durable" / "demo"))
    args = parser.parse_args()
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mailbox, mail_url = spawn(
        [
            sys.executable,
            "-m",
            "services.mailbox",
            "serve",
            "--db",
            str(state / "mailbox.db"),
            "--port",
            "0",
        ],
        env,
    )
    env.update(
        {
            "AGENT_MAIL_BASE_URL": mail_url,
            "AGENT_STATE_STORE": "file",
            "AGENT_CONTENT_DIR": str(state / "content"),
            "AGENT_LEDGER_DIR": str(state / "ledger"),
            "AGENT_TOOL_LEDGER_FILE": str(state / "tool-ledger.txt"),
            # Stream the answer as a preview: the offline planner sends it word by word.
            "AGENT_PREVIEWS": "on",
            "AGENT_PREVIEW_DIR": str(state / "previews"),
            "AGENT_PLANNER_STREAM_DELAY_MS": "80",
            "AGENT_SKILLS_DIR": str(state / "skills"),
            "AGENT_WORKSPACE_DIR": str(state / "workspaces"),
            "AGENT_WORKSPACE_STORE_DIR": str(state / "workspace-store"),
            "AGENT_MCP_SERVERS": json.dumps(MCP_SERVERS),
        }
    )
    host, base = spawn(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--app-dir",
            str(ROOT),
            "--port",
            str(args.port),
            "--store",
            f"sqlite:{state / 'AgentKernel.db'}",
            "--log-level",
            "WARNING",
        ],
        env,
    )
    try:
        return run(base, mail_url, args.exit)
    finally:
        for proc in (host, mailbox):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def run(base: str, mail_url: str, exit_when_done: bool) -> int:
    session_id = f"demo-{int(time.time())}"
    print(f"durable host on {base}, mail service on {mail_url}")
    print(f"session {session_id}: {REQUEST}\n")
    status, accepted = http(
        "POST",
        f"{base}/api/sessions/{session_id}/submissions",
        {"requestId": "demo-1", "text": REQUEST},
    )
    if status != 202:
        raise SystemExit(f"submission refused: {status} {accepted}")
    sub = follow(base, session_id, accepted["submissionId"], time.monotonic() + 300)
    _, stats = http("GET", f"{mail_url}/stats")
    print(f"\nsubmission {sub['status']}:\n{sub.get('answer') or ''}")
    deliveries = (stats or {}).get("deliveriesByRecipient", stats)
    print(f"\nmail service deliveries per recipient: {json.dumps(deliveries)}")
    print(f"watch the session: {base}/api/sessions/{session_id}/page")
    files = run_workspace(base, session_id, time.monotonic() + 120)
    mcp = run_mcp(base, session_id, time.monotonic() + 120)
    run_view = run_skill(base, session_id, time.monotonic() + 120)
    if exit_when_done:
        done = (sub["status"], files["status"], mcp["status"], run_view["status"])
        return 0 if done == ("completed",) * 4 else 1
    print("serving; Ctrl-C to stop")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    return 0


def run_workspace(base: str, session_id: str, deadline: float) -> dict[str, Any]:
    """A second submission that writes a report file and computes over it with run_python;
    then the session's files as the API shows them."""
    print(f"\nsession {session_id}: {WORKSPACE_REQUEST}\n")
    status, accepted = http(
        "POST",
        f"{base}/api/sessions/{session_id}/submissions",
        {"requestId": "demo-workspace", "text": WORKSPACE_REQUEST},
    )
    if status != 202:
        raise SystemExit(f"submission refused: {status} {accepted}")
    sub = follow(base, session_id, accepted["submissionId"], deadline)
    print(f"\nsubmission {sub['status']}:\n{sub.get('answer') or ''}")
    _, listing = http("GET", f"{base}/api/sessions/{session_id}/workspace")
    for item in (listing or {}).get("files", []):
        print(
            f"workspace file {item['path']} ({item['size']} bytes, by {task_label(item['changedBy'])})"
        )
    _, stats = http_text(f"{base}/api/sessions/{session_id}/workspace/files/stats.txt")
    print(f"stats.txt: {stats}")
    return sub


def run_mcp(base: str, session_id: str, deadline: float) -> dict[str, Any]:
    """A submission that calls an MCP server's tool: listed when the turn began, its policy
    (safe: the server says it is read-only) in the intent, its answer as the tool result."""
    print(f"\nsession {session_id}: {MCP_REQUEST}\n")
    status, accepted = http(
        "POST",
        f"{base}/api/sessions/{session_id}/submissions",
        {"requestId": "demo-mcp", "text": MCP_REQUEST},
    )
    if status != 202:
        raise SystemExit(f"submission refused: {status} {accepted}")
    sub = follow(base, session_id, accepted["submissionId"], deadline)
    print(f"\nsubmission {sub['status']}:\n{sub.get('answer') or ''}")
    return sub


def http_text(url: str, timeout: float = 30.0) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", errors="replace")


def run_skill(base: str, request_id: str, deadline: float) -> dict[str, Any]:
    """Register the demo skill, start a run, raise the event it waits for, show its steps."""
    status, registered = http("POST", f"{base}/api/skills", SKILL)
    if status not in (200, 201):
        raise SystemExit(f"skill refused: {status} {registered}")
    name, version = registered["name"], registered["version"]
    print(f"\nskill {name} v{version} registered: {SKILL['description']}")
    status, run = http(
        "POST",
        f"{base}/api/skills/{name}/runs",
        {"requestId": request_id, "input": {"customer": "ACME"}},
    )
    if status not in (200, 202):
        raise SystemExit(f"skill run refused: {status} {run}")
    url = f"{base}/api/skills/{name}/runs/{run['runId']}"
    print(f"  run {run['runId']} started on v{run['version']}: {url}")
    shown, raised = "", False
    while time.monotonic() < deadline:
        _, view = http("GET", url)
        line = f"  run {view['status']:<10} step {view.get('step') or '-'}"
        if line != shown:
            print(line, flush=True)
            shown = line
        if view["status"] == "waiting" and view.get("step") == "form" and not raised:
            print('  the signed form arrives: event signed_form {"seats": 3}')
            http("POST", f"{url}/events/signed_form", {"payload": {"seats": 3}})
            raised = True
        if view["status"] in FINAL:
            for step_id, result in (view.get("steps") or {}).items():
                output = (view.get("outputs") or {}).get(step_id)
                print(f"  step {step_id:<8} ok={result['ok']} {json.dumps(output)[:90]}")
            print(f"skill run {view['status']} on v{view['version']}")
            return dict(view)
        time.sleep(0.2)
    raise SystemExit("the skill run did not finish in time")


if __name__ == "__main__":
    sys.exit(main())
