"""Skills as data, end to end: register, run, version, cancel, crash, and the agent's tool.

Runs on both stores (the skill registry and the attempt ledger follow: files with SQLite,
blobs on Azurite). Tool steps append to the tool ledger file, so "ran exactly once" is a count
of its lines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kernel.common import ids
from kernel.skills import skill as skills
from tests.app.turn_support import ModelServer, start_turn_host, submit, wait_final, wait_phase
from tests.harness import WEBHOOK, HostProcess, store_specs, wait_for

FINAL = ("completed", "failed", "cancelled")


def own_containers(tmp: Path) -> dict[str, str]:
    """A skill registry and a ledger of this host's own (names repeat from test to test)."""
    tag = hashlib.sha256(str(tmp).encode()).hexdigest()[:16]
    return {
        "AGENT_SKILLS_DIR": str(tmp / "skills"),
        "AGENT_SKILLS_CONTAINER": f"skills-{tag}",  # used on Azure only
        "AGENT_LEDGER_CONTAINER": f"ledger-{tag}",
    }


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("skills")
    env = {"AGENT_MODEL_BASE_URL": model.base_url, **own_containers(tmp)}
    host = start_turn_host(request, str(request.param), tmp, env)
    yield host
    host.kill()


@pytest.fixture(autouse=True)
def fresh_script(model: ModelServer) -> None:
    model.script = None


def ledger_lines(host: HostProcess) -> list[str]:
    path = Path(host.env["AGENT_TOOL_LEDGER_FILE"])
    return path.read_text().splitlines() if path.exists() else []


def register(host: HostProcess, definition: dict[str, Any]) -> dict[str, Any]:
    response = host.post("/api/skills", definition)
    assert response.status in (200, 201), (response.status, response.body)
    return dict(response.json())


def start(host: HostProcess, name: str, request_id: str, given: dict | None = None, **kw: Any):
    response = host.post(
        f"/api/skills/{name}/runs", {"requestId": request_id, "input": given or {}, **kw}
    )
    assert response.status == 202, (response.status, response.body)
    return response.json()


def run_view(host: HostProcess, name: str, run: str) -> dict[str, Any]:
    response = host.get(f"/api/skills/{name}/runs/{run}")
    assert response.status == 200, (response.status, response.body)
    return dict(response.json())


def wait_run(host: HostProcess, name: str, run: str, status: str, timeout: float = 60) -> dict:
    def reached() -> dict[str, Any] | None:
        view = run_view(host, name, run)
        if view["status"] in FINAL and view["status"] != status:  # ended otherwise: say how
            raise AssertionError(f"run {run} ended {view['status']}, not {status}: {view}")
        return view if view["status"] == status else None

    return dict(wait_for(reached, timeout, f"run {run} of {name} to be {status}"))


def wait_ended(host: HostProcess, name: str, run: str, timeout: float = 60) -> dict:
    def ended() -> dict[str, Any] | None:
        view = run_view(host, name, run)
        return view if view["status"] in FINAL else None

    return dict(wait_for(ended, timeout, f"run {run} of {name} to end"))


def onboarding(name: str, text: str = "account") -> dict[str, Any]:
    return {
        "name": name,
        "description": "Onboard a customer.",
        "inputs": ["customer"],
        "steps": [
            {
                "id": "account",
                "kind": "tool",
                "tool": "append_ledger",
                "arguments": {"text": f"{text} for ${{input.customer}}"},
            },
            {"id": "form", "kind": "event", "event": "signed_form", "timeoutS": 600},
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
                    },
                    {"id": "cooling", "kind": "timer", "seconds": 0.5},
                ],
            },
            {"id": "note", "kind": "model", "prompt": "welcome ${input.customer}"},
            {
                "id": "welcome",
                "kind": "tool",
                "tool": "append_ledger",
                "arguments": {"text": "welcome ${input.customer}, fee ${steps.fee.value}"},
            },
        ],
    }


def test_a_registered_skill_runs_its_tool_event_timer_join_and_model_steps(host):
    registered = register(host, onboarding("onboard"))
    again = host.post("/api/skills", onboarding("onboard"))
    run = start(host, "onboard", "r1", {"customer": "ACME"})

    waiting = wait_run(host, "onboard", run["runId"], "waiting")
    raised = host.post(
        f"/api/skills/onboard/runs/{run['runId']}/events/signed_form", {"payload": {"seats": 3}}
    )
    done = wait_run(host, "onboard", run["runId"], "completed")
    duplicate = host.post("/api/skills/onboard/runs", {"requestId": "r1", "input": {}})

    assert (registered["created"], registered["version"], registered["versions"]) == (True, 1, [1])
    assert again.status == 200 and again.json()["created"] is False
    assert (waiting["step"], waiting["custom"]["event"]) == ("form", "signed_form")
    assert raised.status == 202
    assert done["version"] == 1 and done["outputs"]["form"] == {"seats": 3}
    assert done["outputs"]["fee"]["value"] == 36
    assert done["outputs"]["checks"]["settled"] == {
        "fee": {"ok": True, "kind": None},
        "cooling": {"ok": True, "kind": None},
    }
    assert done["outputs"]["note"]["text"]
    assert {s: r["ok"] for s, r in done["steps"].items()} == dict.fromkeys(
        ("account", "form", "fee", "cooling", "checks", "note", "welcome"), True
    )
    assert ledger_lines(host)[-2:] == ["account for ACME", "welcome ACME, fee 36"]
    assert duplicate.status == 200 and duplicate.json()["duplicate"] is True
    assert host.status(run["instanceId"])["runtimeStatus"] == "Completed"  # an ordinary task
    listed = host.get("/api/skills").json()["skills"]
    assert {"name": "onboard", "latest": 1, "versions": [1]}.items() <= next(
        s for s in listed if s["name"] == "onboard"
    ).items()
    assert [r["runId"] for r in host.get("/api/skills/onboard/runs").json()["runs"]] == [
        run["runId"]
    ]


def test_an_invalid_skill_is_refused_with_every_error_named_and_nothing_stored(host):
    bad = {
        "name": "broken",
        "inputs": ["who"],
        "colour": "blue",
        "steps": [
            {"id": "a", "kind": "tool", "tool": "write_document", "arguments": {}},
            {"id": "a", "kind": "tool", "tool": "calculator", "arguments": {"expression": "1+"}},
            {
                "id": "c",
                "kind": "tool",
                "tool": "append_ledger",
                "replay": "safe",
                "arguments": {"text": "${steps.later.x} ${input.nobody}"},
            },
            {"id": "later", "kind": "timer", "seconds": -1},
            {"id": "e", "kind": "teleport"},
            {"id": "j", "kind": "join", "mode": "sometimes", "steps": []},
        ],
    }

    refused = host.post("/api/skills", bad)

    assert refused.status == 400
    body = refused.json()
    assert body["error"] == "invalid_skill"
    assert sorted(p["field"] for p in body["problems"]) == sorted(
        [
            "colour",
            "steps[0].tool",
            "steps[1].id",
            "steps[1].arguments.expression",
            "steps[2].replay",
            "steps[2].arguments.text",
            "steps[2].arguments.text",
            "steps[3].seconds",
            "steps[4]",
            "steps[5].mode",
            "steps[5].steps",
        ]
    )
    assert body["field"] == body["problems"][0]["field"]
    assert host.get("/api/skills/broken").status == 404
    assert "broken" not in [s["name"] for s in host.get("/api/skills").json()["skills"]]
    assert host.post("/api/skills", [1, 2]).status == 400
    assert host.post("/api/skills/broken/runs", {"requestId": "x"}).status == 404
    missing = host.post("/api/skills", {**onboarding("needs-input")})
    assert missing.status == 201
    no_input = host.post("/api/skills/needs-input/runs", {"requestId": "x", "input": {}})
    assert no_input.status == 400 and no_input.json()["problems"] == [
        {"field": "input.customer", "message": "this input is declared by the skill and required"}
    ]


def test_a_new_version_applies_to_new_runs_only(host):
    v1 = register(host, onboarding("versioned", "v1 account"))
    first = start(host, "versioned", "r1", {"customer": "Old"})
    wait_run(host, "versioned", first["runId"], "waiting")

    v2 = register(host, onboarding("versioned", "v2 account"))
    host.post(
        f"/api/skills/versioned/runs/{first['runId']}/events/signed_form", {"payload": {"seats": 1}}
    )
    first_done = wait_run(host, "versioned", first["runId"], "completed")
    second = start(host, "versioned", "r2", {"customer": "New"})
    wait_run(host, "versioned", second["runId"], "waiting")
    host.post(
        f"/api/skills/versioned/runs/{second['runId']}/events/signed_form",
        {"payload": {"seats": 2}},
    )
    second_done = wait_run(host, "versioned", second["runId"], "completed")
    pinned = host.post(
        "/api/skills/versioned/runs",
        {"requestId": "r3", "input": {"customer": "Pin"}, "version": 1},
    )

    assert (v1["version"], v2["version"], v2["versions"]) == (1, 2, [1, 2])
    assert (first["version"], first_done["version"]) == (1, 1)
    assert (second["version"], second_done["version"]) == (2, 2)
    assert "v1 account for Old" in ledger_lines(host)
    assert "v2 account for New" in ledger_lines(host)
    assert pinned.status == 202 and pinned.json()["version"] == 1
    old = host.get("/api/skills/versioned/versions/1").json()
    assert old["skill"]["steps"][0]["arguments"]["text"] == "v1 account for ${input.customer}"
    assert host.get("/api/skills/versioned").json()["version"] == 2
    assert host.get("/api/skills/versioned/versions/9").status == 404
    host.post(f"/api/skills/versioned/runs/{pinned.json()['runId']}/cancel")


def test_a_run_is_cancelled_and_then_takes_nothing_more(host):
    register(host, onboarding("cancelled"))
    run = start(host, "cancelled", "r1", {"customer": "Gone"})
    wait_run(host, "cancelled", run["runId"], "waiting")

    cancelled = host.post(f"/api/skills/cancelled/runs/{run['runId']}/cancel", {"reason": "no"})
    view = wait_run(host, "cancelled", run["runId"], "cancelled")
    again = host.post(f"/api/skills/cancelled/runs/{run['runId']}/cancel")
    late = host.post(f"/api/skills/cancelled/runs/{run['runId']}/events/signed_form", {})

    assert cancelled.status == 202
    assert view["runtimeStatus"] == "Terminated"
    assert again.status == 409 and again.json()["error"] == "run_ended"
    assert late.status == 409
    assert "welcome Gone, fee" not in " ".join(ledger_lines(host))


def test_a_cancelled_run_gives_up_its_place_in_a_declared_limit(host):
    entity = f"{WEBHOOK}/entities/limiter/tool-ledger"  # append_ledger's declared limit

    def now() -> str:
        return datetime.now(UTC).isoformat()

    def limiter() -> dict[str, Any]:
        return host.get(entity).json() or {}

    blocker = {"mode": "singleton", "limit": 1, "lease_s": 600, "holder": "test-blocker",
               "instance_id": "none", "event": "none", "first": True}  # fmt: skip
    host.post(f"{entity}?op=acquire", {**blocker, "now": now()})
    wait_for(lambda: "test-blocker" in limiter().get("holders", {}), 60, "the slot taken")
    register(host, {"name": "queued", "steps": [tool_step("one", "append_ledger", text="q1")]})
    first = start(host, "queued", "r1")
    wait_run(host, "queued", first["runId"], "waiting_for_limit")

    cancelled = host.post(f"/api/skills/queued/runs/{first['runId']}/cancel")
    released = host.wait_for_status(f"{first['instanceId']}:release", ("Completed",))
    host.post(f"{entity}?op=release", {"holder": "test-blocker", "now": now()})
    second = start(host, "queued", "r2")
    done = wait_run(host, "queued", second["runId"], "completed")

    assert cancelled.status == 202 and released["output"]["released"] == 1
    assert done["steps"]["one"]["ok"] is True
    assert ledger_lines(host).count("q1") == 1  # the cancelled run never appended
    assert (limiter()["holders"], limiter()["waiters"]) == ({}, [])


def test_fail_fast_stops_at_the_first_failure_after_its_retries(host):
    register(
        host,
        {
            "name": "fragile",
            "steps": [
                {"id": "gate", "kind": "approval", "timeoutS": 600},
                {"id": "proceed", "kind": "event", "event": "proceed", "timeoutS": 600},
                {
                    "id": "both",
                    "kind": "join",
                    "mode": "failFast",
                    "steps": [
                        {
                            "id": "divide",
                            "kind": "tool",
                            "tool": "calculator",
                            "arguments": {"expression": "1/0"},
                            "retry": {"maxAttempts": 2, "firstRetryS": 0.1},
                        },
                        {"id": "long", "kind": "timer", "seconds": 3600},
                    ],
                },
            ],
        },
    )
    run = start(host, "fragile", "r1")
    wait_run(host, "fragile", run["runId"], "approval")
    decide = f"/api/skills/fragile/runs/{run['runId']}/approvals/gate"

    approved = host.post(decide, {"requestId": "a1", "decision": "approve"})
    wait_run(host, "fragile", run["runId"], "waiting")
    repeated = host.post(decide, {"requestId": "a1", "decision": "approve"})
    other = host.post(decide, {"requestId": "a2", "decision": "reject"})
    host.post(f"/api/skills/fragile/runs/{run['runId']}/events/proceed", {})
    done = wait_run(host, "fragile", run["runId"], "failed")
    branch = skills.branch_instance_id(run["instanceId"], "long")

    assert approved.status == 202 and approved.json()["duplicate"] is False
    assert repeated.status == 202 and repeated.json()["duplicate"] is True
    assert other.status == 409 and other.json()["error"] == "already_decided"
    assert done["outputs"]["gate"] == {"decision": "approve", "request_id": "a1"}
    assert done["failedStep"] == "both"
    assert done["steps"]["divide"]["attempts"] == 2
    assert done["steps"]["both"]["kind"] == "join_failed"
    assert host.wait_for_status(branch, ("Terminated",))["runtimeStatus"] == "Terminated"


def register_call(skill: dict[str, Any]) -> Callable[[list[dict]], dict | None]:
    """The model's first answer is a register_skill call; the next ones the planner's."""
    call = {
        "id": "call_register",
        "type": "function",
        "function": {"name": "register_skill", "arguments": json.dumps({"skill": skill})},
    }
    return lambda messages: {"tool_calls": [call]} if len(messages) == 1 else None


def test_the_agent_registers_a_skill_only_when_approved_and_it_outlives_the_session(host, model):
    model.script = register_call(onboarding("agent-made", "agent account"))
    sub = submit(host, "author", "learn how to onboard a customer")
    task_id = ids.tool_task_id(sub, 1, 0)
    waiting = wait_phase(host, task_id, "approval")
    before = host.get("/api/skills/agent-made")

    approved = host.post(
        f"/api/sessions/author/approvals/{task_id}", {"requestId": "a1", "decision": "approve"}
    )
    final = wait_final(host, "author", sub)
    registered = host.get("/api/skills/agent-made").json()
    run = start(host, "agent-made", "r1", {"customer": "Orphan"})
    wait_run(host, "agent-made", run["runId"], "waiting")
    deleted = host.request("DELETE", "/api/sessions/author")
    host.post(
        f"/api/skills/agent-made/runs/{run['runId']}/events/signed_form", {"payload": {"seats": 4}}
    )
    done = wait_run(host, "agent-made", run["runId"], "completed")

    assert waiting["tool"] == "register_skill"
    assert before.status == 404  # nothing is stored before a person approves
    assert approved.status == 202 and final["status"] == "completed"
    assert registered["registeredBy"] == {"via": "agent", "session_id": "author"}
    assert deleted.status == 200 and host.get("/api/sessions/author").status == 404
    assert done["outputs"]["fee"]["value"] == 48
    assert "welcome Orphan, fee 48" in ledger_lines(host)


def test_the_agent_cannot_register_a_skill_that_is_rejected(host, model):
    model.script = register_call(onboarding("refused-by-person"))
    sub = submit(host, "author2", "learn it")
    task_id = ids.tool_task_id(sub, 1, 0)
    wait_phase(host, task_id, "approval")

    host.post(
        f"/api/sessions/author2/approvals/{task_id}", {"requestId": "a1", "decision": "reject"}
    )
    wait_final(host, "author2", sub)

    assert host.get("/api/skills/refused-by-person").status == 404


# --- crashes ----------------------------------------------------------------------------------


@pytest.fixture
def crash_host(request: pytest.FixtureRequest, store_kind: str, tmp_path: Path) -> Iterator:
    hosts: list[HostProcess] = []

    def factory() -> HostProcess:
        env = {"AGENT_TOOL_LEASE_S": "0.5", **own_containers(tmp_path)}
        # start_turn_host starts it; the test restarts it with a fault plan.
        host = start_turn_host(request, store_kind, tmp_path, env)
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()


@pytest.mark.crash
def test_sigkill_mid_run_then_restart_completes_with_each_tool_step_run_once(crash_host):
    host = crash_host()
    register(
        host,
        {
            "name": "crashy",
            "steps": [
                {"id": "one", "kind": "tool", "tool": "append_ledger", "arguments": {"text": "1"}},
                {"id": "pause", "kind": "timer", "seconds": 0.5},
                {"id": "two", "kind": "tool", "tool": "append_ledger", "arguments": {"text": "2"}},
                {"id": "form", "kind": "event", "event": "go", "timeoutS": 600},
                {
                    "id": "three",
                    "kind": "tool",
                    "tool": "append_ledger",
                    "arguments": {"text": "3"},
                },
            ],
        },
    )
    host.kill()
    # The first activity of the run is step one's tool: killed after the tool ran and its
    # result was recorded in the attempt ledger, before its completion reached the history.
    host.start(faults="activity.before_complete@1")
    run = start(host, "crashy", "r1")
    assert host.wait_exit(60) != 0, "the fault point was not reached"

    host.start()
    wait_run(host, "crashy", run["runId"], "waiting")
    host.kill()  # and once more while it waits for its event
    host.start()
    host.post(f"/api/skills/crashy/runs/{run['runId']}/events/go", {})
    done = wait_run(host, "crashy", run["runId"], "completed")

    assert ledger_lines(host) == ["1", "2", "3"]
    assert [done["steps"][s]["attempts"] for s in ("one", "two", "three")] == [1, 1, 1]
    # Step one's result came from its attempt record after the restart: the tool did not run
    # again; the others ran once each.
    assert done["steps"]["one"]["reused"] is True
    assert [done["steps"][s]["runs"] for s in ("two", "three")] == [1, 1]


def test_bad_requests_are_named_and_change_nothing(host):
    register(host, onboarding("strict"))
    run = start(host, "strict", "r1", {"customer": "Pat"})
    wait_run(host, "strict", run["runId"], "waiting")
    runs = f"/api/skills/strict/runs/{run['runId']}"

    cases = {
        "invalid_json": host.post("/api/skills", raw=b"{not json"),
        "invalid_skill_name": host.get("/api/skills/Not_Lower"),
        "invalid_version": host.get("/api/skills/strict/versions/first"),
        "skill_not_found": host.post("/api/skills/nosuch/runs", {"requestId": "r1"}),
        "unknown_field": host.post("/api/skills/strict/runs", {"requestId": "r2", "when": 1}),
        "invalid_input": host.post("/api/skills/strict/runs", {"requestId": "r3", "input": 5}),
        "version_not_found": host.post(
            "/api/skills/strict/runs", {"requestId": "r4", "input": {"customer": "x"}, "version": 7}
        ),
        "run_not_found": host.get("/api/skills/strict/runs/no-such-run"),
        "event_not_found": host.post(f"{runs}/events/unexpected", {}),
        "step_not_found": host.post(
            f"{runs}/approvals/account", {"requestId": "a1", "decision": "approve"}
        ),
        "invalid_decision": host.post(
            f"{runs}/approvals/account", {"requestId": "a1", "decision": "maybe"}
        ),
    }

    assert {code: (r.status, r.json()["error"]) for code, r in cases.items()} == {
        "invalid_json": (400, "invalid_json"),
        "invalid_skill_name": (400, "invalid_skill_name"),
        "invalid_version": (400, "invalid_version"),
        "skill_not_found": (404, "skill_not_found"),
        "unknown_field": (400, "unknown_field"),
        "invalid_input": (400, "invalid_input"),
        "version_not_found": (404, "version_not_found"),
        "run_not_found": (404, "run_not_found"),
        "event_not_found": (404, "event_not_found"),
        "step_not_found": (404, "step_not_found"),
        "invalid_decision": (400, "invalid_decision"),
    }
    assert all(r.json()["message"] for r in cases.values())
    assert host.get("/api/skills/strict").json()["versions"] == [1]
    assert [r["runId"] for r in host.get("/api/skills/strict/runs").json()["runs"]] == [
        run["runId"]
    ]
    assert run_view(host, "strict", run["runId"])["status"] == "waiting"
    host.post(f"{runs}/cancel")


@pytest.mark.crash
def test_a_step_replay_policy_decides_whether_a_tool_that_died_mid_run_runs_again(crash_host):
    host = crash_host()
    calc = {"id": "calc", "kind": "tool", "tool": "calculator", "arguments": {"expression": "6*7"}}
    retried = {"retry": {"maxAttempts": 3, "firstRetryS": 0.1}}
    register(host, {"name": "safe-calc", "steps": [{**calc, **retried}]})
    register(host, {"name": "unsafe-calc", "steps": [{**calc, **retried, "replay": "unsafe"}]})
    outcomes = {}
    for name in ("safe-calc", "unsafe-calc"):
        host.kill()
        host.env["KERNEL_FAULTS"] = "tool.after_effect@1"  # killed after the tool ran, before
        host.start()  # its result was recorded: the outcome of the try is unknown
        run = start(host, name, "r1")
        assert host.wait_exit(60) != 0, "the fault point was not reached"
        host.env.pop("KERNEL_FAULTS")
        host.start()
        outcomes[name] = wait_ended(host, name, run["runId"])["steps"]["calc"]

    assert outcomes["safe-calc"] == {"ok": True, "attempts": 1, "runs": 2}
    assert outcomes["unsafe-calc"]["kind"] == "interrupted"  # and never tried again
    assert (outcomes["unsafe-calc"]["ok"], outcomes["unsafe-calc"]["attempts"]) == (False, 1)


def test_a_join_branch_can_be_a_sequence_that_waits_for_its_own_event(host):
    ledger = "append_ledger"
    register(
        host,
        {
            "name": "branchy",
            "inputs": ["who"],
            "steps": [
                {
                    "id": "both",
                    "kind": "join",
                    "steps": [
                        {
                            "id": "flow",
                            "kind": "sequence",
                            "steps": [
                                tool_step("begin", ledger, text="begin ${input.who}"),
                                {"id": "wait", "kind": "event", "event": "go", "timeoutS": 600},
                                tool_step("end", ledger, text="end ${steps.wait.n}"),
                            ],
                        },
                        {"id": "nap", "kind": "timer", "seconds": 0.3},
                    ],
                },
                tool_step("done", ledger, text="done after ${steps.end.appended}"),
            ],
        },
    )
    run = start(host, "branchy", "r1", {"who": "Kim"})
    branch = skills.branch_instance_id(run["instanceId"], "flow")
    waiting = wait_phase(host, branch, "waiting")

    raised = host.post(f"/api/skills/branchy/runs/{run['runId']}/events/go", {"payload": {"n": 5}})
    done = wait_run(host, "branchy", run["runId"], "completed")

    assert (waiting["step"], waiting["event"]) == ("wait", "go")
    assert raised.status == 202 and raised.json()["instanceId"] == branch
    assert done["outputs"]["flow"] == {"steps": ["begin", "wait", "end"]}
    assert ledger_lines(host)[-3:] == ["begin Kim", "end 5", "done after end 5"]


def tool_step(step_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "tool", "tool": name, "arguments": arguments}
