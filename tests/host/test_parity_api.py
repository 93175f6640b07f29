"""Management API and SDK-client parity with the Durable extension, over real HTTP.

One parity host per module (tests/apps/parity: AnyState, 2 concurrent activities, a 2 s
function timeout). Each test names the behaviour it pins; docs/extension-semantics.md
lists them with their sources.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import azure_env
from tests.harness import APPS, WEBHOOK, HostProcess, store_spec_for, store_specs, wait_for

DONE = ("Completed", "Failed", "Terminated")


@pytest.fixture(scope="module", params=store_specs())
def parity(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("parity")
    env = {"PARITY_MARKS": str(tmp / "marks.txt")}
    if request.param == "azure":
        env.update(azure_env(request, "parity"))
    host = HostProcess(APPS / "parity", store_spec_for(str(request.param), tmp), env=env)
    host.start()
    yield host
    host.kill()


def marks(host: HostProcess) -> list[str]:
    path = Path(host.env["PARITY_MARKS"])
    return path.read_text().splitlines() if path.exists() else []


def sdk(host: HostProcess, op: str, **args) -> dict:
    """Call a ``DurableOrchestrationClient`` method inside the app (POST /api/sdk/{op})."""
    resp = host.post(f"/api/sdk/{op}", args)
    assert resp.status == 200, resp.body
    return resp.json()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def finished(host: HostProcess, instance_id: str) -> dict:
    return host.wait_for_status(instance_id, DONE)


# --- restart ---------------------------------------------------------------------------


def test_restart_with_a_new_id_answers_202_with_the_check_status_payload_of_the_new_id(parity):
    old = parity.start_orchestration("hello", {"who": "ann"}, unique("r"))
    finished(parity, old)

    resp = parity.post(f"{WEBHOOK}/instances/{old}/restart?restartWithNewInstanceId=true")

    body = resp.json()
    assert resp.status == 202 and body["id"] != old
    assert (
        resp.headers["Location"] == body["statusQueryGetUri"]
        and resp.headers["Retry-After"] == "10"
    )
    assert body["restartPostUri"].startswith(
        parity.base_url + WEBHOOK + f"/instances/{body['id']}/restart"
    )
    assert finished(parity, body["id"])["output"] == "hello ann"


def test_restart_with_the_same_id_runs_it_again(parity):
    instance = parity.start_orchestration("hello", {"who": "bob"}, unique("same"))
    first = finished(parity, instance)

    resp = parity.post(f"{WEBHOOK}/instances/{instance}/restart?restartWithNewInstanceId=false")

    assert resp.status == 202 and resp.json()["id"] == instance
    again = wait_for(
        lambda: (
            (s := parity.status(instance))
            and s["runtimeStatus"] == "Completed"
            and s["createdTime"] >= first["createdTime"]
            and s
        ),
        60,
        "the restarted run",
    )
    assert again["output"] == "hello bob" and again["input"] == {"who": "bob"}


def test_restart_of_an_unknown_instance_is_the_extensions_400(parity):
    resp = parity.post(f"{WEBHOOK}/instances/{unique('nobody')}/restart")

    body = resp.json()
    assert resp.status == 400
    assert body["Message"] == "InstanceId does not match a valid orchestration instance."
    assert "was not found" in body["ExceptionMessage"]


def test_restart_with_the_same_id_of_a_running_instance_is_409_under_non_running_states(
    shared_host,
):
    instance = shared_host.start_orchestration("approval", instance_id=unique("run"))

    resp = shared_host.post(
        f"{WEBHOOK}/instances/{instance}/restart?restartWithNewInstanceId=false"
    )

    assert resp.status == 409
    assert resp.json()["Message"] == "A non-terminal instance with this instance ID already exists."
    assert shared_host.status(instance)["runtimeStatus"] in ("Pending", "Running")


def test_any_state_lets_a_start_replace_a_running_instance(parity):
    instance = parity.start_orchestration("waiter", instance_id=unique("any"))
    parity.wait_for_status(instance, ("Running",))

    resp = parity.post(f"{WEBHOOK}/orchestrators/hello/{instance}", {"who": "replaced"})

    assert resp.status == 202
    assert finished(parity, instance)["output"] == "hello replaced"


# --- rewind ----------------------------------------------------------------------------


def test_rewind_runs_the_failed_step_again_and_keeps_the_completed_ones(parity):
    instance = parity.start_orchestration("fails_then_recovers", instance_id=unique("rw"))
    failed = finished(parity, instance)
    assert failed["runtimeStatus"] == "Failed" and "first run of" in failed["output"]

    resp = parity.post(f"{WEBHOOK}/instances/{instance}/rewind?reason=fixed")

    assert resp.status == 202 and resp.body == b""
    assert parity.status(instance)["runtimeStatus"] in (
        "Pending",
        "Running",
        "Completed",
    )  # no longer Failed
    status = finished(parity, instance)
    assert status["output"] == ["before", f"{instance} ok", "after"]
    assert marks(parity).count(f"once:{instance}") == 2
    history = parity.status(instance, "?showHistory=true")["historyEvents"]
    assert [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"] == [
        "echo",
        "fails_once",
        "echo",
    ]
    assert "Rewound: TaskFailed 1" in [
        e.get("Data") for e in history if e["EventType"] == "GenericEvent"
    ]


def test_rewind_of_an_exhausted_retry_starts_it_over(parity):
    instance = parity.start_orchestration("retry_then_more", instance_id=unique("rr"))
    assert finished(parity, instance)["runtimeStatus"] == "Failed"

    assert parity.post(f"{WEBHOOK}/instances/{instance}/rewind").status == 202

    assert finished(parity, instance)["output"] == [f"{instance} ok on run 3", "after"]


def test_rewind_of_a_parent_rewinds_its_failed_child(parity):
    parent = parity.start_orchestration("parent_of_failing", instance_id=unique("rp"))
    assert finished(parity, parent)["runtimeStatus"] == "Failed"
    child = f"{parent}-child"
    assert parity.status(child)["runtimeStatus"] == "Failed"

    assert parity.post(f"{WEBHOOK}/instances/{parent}/rewind?reason=again").status == 202

    assert finished(parity, parent)["output"] == {"child": ["before", f"{child} ok", "after"]}
    assert parity.status(child)["runtimeStatus"] == "Completed"


def test_rewind_answers_412_unless_failed_and_404_for_unknown_ids_with_the_extension_texts(parity):
    instance = parity.start_orchestration("hello", {"who": "x"}, unique("rw412"))
    finished(parity, instance)

    not_failed = parity.post(f"{WEBHOOK}/instances/{instance}/rewind")
    missing = parity.post(f"{WEBHOOK}/instances/nobody-{instance}/rewind")

    assert not_failed.status == 412
    assert (
        not_failed.json()
        == 'This orchestration has status Completed, but only orchestrations in the "Failed" state can be rewound.'
    )
    assert (
        missing.status == 404
        and missing.json() == f'No orchestration with instance ID "$nobody-{instance}" found.'
    )


# --- suspend / resume / terminate in the wrong state ----------------------------------------


def test_wrong_state_suspend_and_resume_are_refused_and_finished_ones_are_410(parity):
    instance = parity.start_orchestration("waiter", instance_id=unique("sr"))
    parity.wait_for_status(instance, ("Running",))

    resume_running = parity.post(f"{WEBHOOK}/instances/{instance}/resume")
    parity.post(f"{WEBHOOK}/instances/{instance}/suspend")
    parity.wait_for_status(instance, ("Suspended",))
    suspend_again = parity.post(f"{WEBHOOK}/instances/{instance}/suspend")
    parity.post(f"{WEBHOOK}/instances/{instance}/resume")
    parity.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/go", "now")
    done = finished(parity, instance)

    # The extension's catch-all: 500 with an HttpError that names the reason.
    assert resume_running.status == 500 and suspend_again.status == 500
    assert resume_running.json()["Message"] == "Something went wrong while processing your request"
    assert resume_running.json()["ExceptionMessage"] == (
        f"Cannot resume the orchestration instance {instance} because instance is in the Running state."
    )
    assert suspend_again.json()["ExceptionType"] == "System.InvalidOperationException"
    assert "Suspended state" in suspend_again.json()["ExceptionMessage"]
    assert done["output"] == "now"
    for action in ("suspend", "resume", "terminate"):
        assert parity.post(f"{WEBHOOK}/instances/{instance}/{action}").status == 410
    history = parity.status(instance, "?showHistory=true")["historyEvents"]
    kinds = [e["EventType"] for e in history]
    assert kinds.count("ExecutionSuspended") == 1 and kinds.count("ExecutionResumed") == 1


def test_the_sdk_client_fails_a_suspend_of_a_suspended_and_a_resume_of_a_running_instance(parity):
    # The extension's e2e scenarios SuspendSuspendedOrchestration_ShouldFail and
    # ResumeRunningOrchestration_ShouldFail: the client call raises.
    instance = sdk(parity, "start", name="waiter", instance_id=unique("sr-sdk"))["result"]
    parity.wait_for_status(instance, ("Running",))

    resume_running = sdk(parity, "resume", instance_id=instance)
    assert sdk(parity, "suspend", instance_id=instance)["ok"]
    parity.wait_for_status(instance, ("Suspended",))
    suspend_suspended = sdk(parity, "suspend", instance_id=instance)
    parity.post(f"{WEBHOOK}/instances/{instance}/terminate")

    # The text Microsoft's scenarios assert (the SDK accepts only 202, 410 and 404).
    expected = "The operation failed with an unexpected status code 500"
    assert not resume_running["ok"] and expected in resume_running["error"]
    assert not suspend_suspended["ok"] and expected in suspend_suspended["error"]
    assert finished(parity, instance)["runtimeStatus"] == "Terminated"


def test_a_late_result_for_a_finished_orchestration_is_dropped(parity):
    # Long enough that the terminate goes in while it still runs, however late the test sees
    # it start on a loaded machine (a result before the terminate would complete the instance).
    instance = parity.start_orchestration("one_slow_step", {"seconds": 5}, unique("late"))
    wait_for(lambda: f"start:{instance}" in marks(parity), 60, "the activity to start")

    parity.post(f"{WEBHOOK}/instances/{instance}/terminate?reason=enough")
    wait_for(lambda: f"end:{instance}" in marks(parity), 60, "the activity to end")
    status = finished(parity, instance)

    assert status["runtimeStatus"] == "Terminated" and status["output"] == "enough"
    history = wait_for(
        lambda: parity.status(instance, "?showHistory=true")["historyEvents"], 60, "history"
    )
    assert not [e for e in history if e["EventType"] == "TaskCompleted"]


# --- the SDK client's management methods -------------------------------------------------------


def test_sdk_status_all_status_by_and_purges(parity):
    prefix = unique("sdk")
    since = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    done = [
        sdk(parity, "start", name="hello", instance_id=f"{prefix}-{i}", input={"who": i})["result"]
        for i in range(3)
    ]
    waiting = sdk(parity, "start", name="waiter", instance_id=f"{prefix}-w")["result"]
    for instance in done:
        finished(parity, instance)
    parity.wait_for_status(waiting, ("Running",))

    everything = sdk(parity, "status_all")["result"]
    completed = sdk(parity, "status_by", prefix=prefix, statuses=["Completed"], **{"from": since})[
        "result"
    ]
    running = sdk(parity, "status_by", prefix=prefix, statuses=["Running", "Pending"])["result"]
    future = sdk(parity, "status_by", prefix=prefix, **{"from": "2999-01-01T00:00:00+00:00"})[
        "result"
    ]
    purged_one = sdk(parity, "purge", instance_id=done[0])["result"]
    purged_again = sdk(parity, "purge", instance_id=done[0])["result"]
    purged_rest = sdk(parity, "purge_by", statuses=["Completed"], **{"from": since})["result"]

    assert set(done) | {waiting} <= set(everything)
    assert completed == sorted(done) and running == [waiting] and future == []
    assert (purged_one, purged_again) == (1, 0)
    assert purged_rest >= 2 and parity.status(done[1]) is None
    assert parity.status(waiting)["runtimeStatus"] == "Running"


def test_sdk_suspend_resume_terminate_restart_and_rewind(parity):
    waiting = sdk(parity, "start", name="waiter", instance_id=unique("sdk-w"))["result"]
    parity.wait_for_status(waiting, ("Running",))

    assert sdk(parity, "suspend", instance_id=waiting)["ok"]
    parity.wait_for_status(waiting, ("Suspended",))
    assert sdk(parity, "resume", instance_id=waiting)["ok"]
    parity.wait_for_status(waiting, ("Running",))
    assert sdk(parity, "terminate", instance_id=waiting, reason="sdk says stop")["ok"]
    assert finished(parity, waiting)["output"] == "sdk says stop"
    assert sdk(parity, "suspend", instance_id=waiting)["ok"]  # 410 is success for the SDK

    restarted = sdk(parity, "restart", instance_id=waiting, new_id=True)["result"]
    assert (
        isinstance(restarted, dict) and restarted["id"] != waiting
    )  # the real client returns the payload
    failing = sdk(parity, "start", name="fails_then_recovers", instance_id=unique("sdk-rw"))[
        "result"
    ]
    assert finished(parity, failing)["runtimeStatus"] == "Failed"
    assert sdk(parity, "rewind", instance_id=failing, reason="sdk")["ok"]
    assert finished(parity, failing)["runtimeStatus"] == "Completed"
    refused = sdk(parity, "rewind", instance_id=failing, reason="again")
    assert not refused["ok"] and 'only orchestrations in the "Failed" state' in refused["error"]
    missing = sdk(parity, "restart", instance_id=unique("none"))
    assert not missing["ok"] and "400" in missing["error"]


def test_sdk_raise_event_double_encodes_the_payload_issue_295(parity):
    instance = parity.start_orchestration("waiter", instance_id=unique("295"))

    sdk(parity, "raise", instance_id=instance, name="go", data={"a": 1})

    assert finished(parity, instance)["output"] == '{"a": 1}'


# --- queries ------------------------------------------------------------------------------------


def test_query_filters_by_time_status_prefix_and_pages_with_continuation_tokens(parity):
    prefix = unique("q")
    for i in range(5):
        parity.start_orchestration("hello", {"who": i}, f"{prefix}-{i}")
    for i in range(5):
        finished(parity, f"{prefix}-{i}")
    now = datetime.now(UTC)

    def page(query: str, token: str | None = None):
        headers = {"x-ms-continuation-token": token} if token else {}
        resp = parity.get(f"{WEBHOOK}/instances?instanceIdPrefix={prefix}&{query}", headers=headers)
        assert resp.status == 200
        return resp.json(), resp.headers.get("x-ms-continuation-token")

    seen, token, pages = [], None, 0
    for _ in range(10):
        rows, token = page("top=2&runtimeStatus=Completed,Failed", token)
        seen += [r["instanceId"] for r in rows]
        pages += 1
        if not token:
            break
    later, _ = page(
        f"createdTimeFrom={(now + timedelta(minutes=1)).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
    )
    earlier, _ = page(f"createdTimeTo={(now - timedelta(hours=1)).isoformat().replace('+', '%2B')}")
    no_input, _ = page("showInput=false")

    assert sorted(seen) == [f"{prefix}-{i}" for i in range(5)] and pages == 3
    assert later == [] and earlier == []
    assert len(no_input) == 5 and all(r["input"] is None for r in no_input)


# --- status and history view ----------------------------------------------------------------------


def test_history_view_follows_the_extension_transform(parity):
    instance = parity.start_orchestration("parent_of_failing", instance_id=unique("hv"))
    finished(parity, instance)

    view = parity.status(instance, "?showHistory=true&showHistoryOutput=true")["historyEvents"]
    quiet = parity.status(instance, "?showHistory=true")["historyEvents"]

    kinds = [e["EventType"] for e in view]
    assert kinds == ["ExecutionStarted", "SubOrchestrationInstanceFailed", "ExecutionCompleted"]
    started, failed, completed = view
    assert (
        started["FunctionName"] == "parent_of_failing"
        and "Input" not in started
        and "Name" not in started
    )
    assert failed["FunctionName"] == "fails_then_recovers" and "TaskScheduledId" not in failed
    assert failed["ScheduledTime"].endswith("Z") and "Reason" in failed
    assert completed["OrchestrationStatus"] == "Failed" and completed["Result"].startswith(
        "Orchestrator function"
    )
    assert all("EventId" not in e and "IsPlayed" not in e for e in view)
    assert "Result" not in quiet[-1]


def test_a_scheduled_step_still_running_shows_as_task_scheduled(parity):
    # Long enough to be still running when the history is read, however late the test sees it
    # start on a loaded machine.
    instance = parity.start_orchestration("one_slow_step", {"seconds": 5}, unique("sched"))
    wait_for(lambda: f"start:{instance}" in marks(parity), 60, "the activity to start")

    view = parity.status(instance, "?showHistory=true")["historyEvents"]

    assert [e["EventType"] for e in view] == ["ExecutionStarted", "TaskScheduled"]
    assert view[1]["Name"] == "marked_sleep" and "Input" not in view[1]
    finished(parity, instance)


def test_every_time_in_the_api_ends_with_z(parity):
    instance = parity.start_orchestration("timestamps", instance_id=unique("z"))
    status = finished(parity, instance)
    view = parity.status(instance, "?showHistory=true")

    stamps = [view["createdTime"], view["lastUpdatedTime"]]
    for event in view["historyEvents"]:
        stamps += [
            v for k, v in event.items() if k in ("Timestamp", "ScheduledTime", "FireAt") and v
        ]
    assert stamps and all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", s) for s in stamps
    )
    first, second, _ = status["output"]
    assert first.endswith("+00:00") and second >= first  # the SDK's aware UTC datetimes


# --- durable HTTP, timeouts, concurrency, logs ---------------------------------------------------------


def test_call_http_with_a_managed_identity_fails_clearly(parity):
    instance = parity.start_orchestration("managed_identity_call", instance_id=unique("mi"))

    output = finished(parity, instance)["output"]

    assert output.startswith(
        "Activity function 'BuiltIn::HttpActivity' failed: No managed identity token for"
    )


def test_call_http_returns_status_and_headers(parity):
    instance = parity.start_orchestration(
        "plain_http_call", {"url": f"{parity.base_url}/admin/host/status"}, unique("http")
    )

    assert finished(parity, instance)["output"] == {"status": 200, "has_headers": True}


def test_function_timeout_fails_the_activity_and_a_sync_one_runs_on_in_the_background(parity):
    instance = parity.start_orchestration("times_out", instance_id=unique("to"))

    output = finished(parity, instance)["output"]

    assert output == [
        "Activity function 'sleep_sync' failed: Timeout value of 00:00:02 was exceeded by function: Functions.sleep_sync ",
        "Activity function 'sleep_async' failed: Timeout value of 00:00:02 was exceeded by function: Functions.sleep_async ",
    ]  # the SDK's "<Reason> \n <Details>", cut at the line break
    # The sync function could not be stopped: it finished later, its result dropped.
    wait_for(lambda: "sync slept 3" in marks(parity), 60, "the abandoned sync activity to end")
    assert "async slept 3" not in marks(parity)  # the async one was cancelled


def test_no_more_activities_run_at_once_than_max_concurrent_activity_functions(parity):
    instance = parity.start_orchestration("fan_out_marked", instance_id=unique("fan"))
    assert len(finished(parity, instance)["output"]) == 6

    running, peak = 0, 0
    for line in marks(parity):
        if line.startswith(("start:", "end:")) and line.split(":", 1)[1].startswith(f"{instance}:"):
            running += 1 if line.startswith("start:") else -1
            peak = max(peak, running)
    assert peak == 2


def test_log_lines_carry_the_instance_id_and_replay_safe_logs_appear_once(parity):
    instance = parity.start_orchestration("replay_safe_logger", instance_id=unique("log"))
    finished(parity, instance)

    lines = [line for line in parity.log_path.read_text().splitlines() if f"of {instance}" in line]

    assert [re.search(r"parity-step (\d)", line).group(1) for line in lines] == ["0", "1", "2"]
    assert all(f"[{instance}]" in line for line in lines)
