"""Incremental replay on a real host: steps continue a live session, and after a restart with
changed orchestrator code the rebuilt session fails the instance with the named mismatch.

The app is written to a temporary directory so the test can change it between two runs of
the host on one task hub, as a deployment would (incremental replay on through
``DURABLE_HOST_SESSIONS=1``, the extension's opt-in name going through host.json).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import WEBHOOK, wait_for

HOST_JSON = {
    "version": "2.0",
    "extensions": {
        "durableTask": {"hubName": "SessionsHub", "extendedSessionsEnabled": True},
        "http": {"routePrefix": "api"},
    },
}

APP = """
import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.orchestration_trigger(context_name="context")
def steps(context: df.DurableOrchestrationContext):
    done = []
    for n in range(3):
        done.append((yield context.call_activity("{activity}", n)))
    done.append((yield context.wait_for_external_event("go")))
    done.append((yield context.call_activity("{activity}", 3)))
    return done


@app.activity_trigger(input_name="n")
def say(n: int) -> str:
    return f"said {{n}}"


@app.activity_trigger(input_name="n")
def shout(n: int) -> str:
    return f"SHOUTED {{n}}"
"""


def write_app(folder: Path, activity: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "host.json").write_text(json.dumps(HOST_JSON))
    (folder / "function_app.py").write_text(APP.format(activity=activity))
    return folder


def test_steps_continue_a_session_and_a_changed_orchestrator_fails_on_rebuild(
    make_host, tmp_path, monkeypatch
):
    monkeypatch.delenv("DURABLE_HOST_SESSIONS", raising=False)  # host.json opts in
    app = write_app(tmp_path / "app", "say")
    first = make_host(str(app)).start()
    instance = first.start_orchestration("steps", None, "steps-1")

    def stepped() -> bool:
        status = first.status(instance, "?showHistory=true") or {}
        events = status.get("historyEvents") or []
        return sum(e["EventType"] == "TaskCompleted" for e in events) == 3

    wait_for(stepped, 60, "the three steps")
    assert first.get("/admin/host/metrics").json().get("session_steps", 0) >= 1
    assert first.stop() == 0

    write_app(app, "shout")  # a deployment that renamed the activity the steps call
    second = make_host(str(app)).start()
    response = second.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/go", "now")
    assert response.status == 202, response.body
    failed = second.wait_for_status(instance, timeout=60)

    assert failed["runtimeStatus"] == "Failed"
    output = str(failed["output"])
    assert "Non-Deterministic workflow detected" in output
    assert "TaskScheduled #0 (activity 'say')" in output
    assert "a call to activity 'shout'" in output
