"""The dashboard at /admin/dashboard: its API (filters, paging, keys) and the page itself in
headless Chromium (a started instance listed, its timeline of activities, a terminate
confirmed in the page's dialog). Screenshots are saved in the test's tmp dir and printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import APPS, WEBHOOK, HostProcess, wait_for

MASTER = "dashboard-test-master-key-0123456789abcdef"
KEY = {"x-functions-key": MASTER}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("dashboard")
    process = HostProcess(
        APPS / "basic",
        f"sqlite:{tmp / 'hub.db'}",
        env={"DURABLE_HOST_MASTER_KEY": MASTER},
        args=["--auth", "keys"],
    ).start()
    yield process
    process.kill()


def start(host: HostProcess, name: str, instance_id: str, body: Any = None) -> str:
    resp = host.post(f"{WEBHOOK}/orchestrators/{name}/{instance_id}", body, headers=KEY)
    assert resp.status == 202, resp.body
    return instance_id


def settled(host: HostProcess, instance_id: str, status: str) -> None:
    def probe() -> bool:
        resp = host.get(f"{WEBHOOK}/instances/{instance_id}", headers=KEY)
        return resp.status in (200, 202) and resp.json()["runtimeStatus"] == status

    wait_for(probe, 30, f"{instance_id} to be {status}")


def api(host: HostProcess, path: str) -> Any:
    resp = host.get(f"/admin/dashboard/api/{path}", headers=KEY)
    assert resp.status == 200, resp.body
    return resp.json()


def test_the_dashboard_needs_the_master_key(host: HostProcess) -> None:
    assert host.get("/admin/dashboard").status == 401
    assert host.get("/admin/dashboard/api/instances").status == 401
    page = host.get(f"/admin/dashboard?code={MASTER}")
    assert page.status == 200 and b"function drawTimeline" in page.body
    assert "script-src 'nonce-" in page.headers["Content-Security-Policy"]
    assert host.post("/admin/dashboard/api/instances", {}, headers=KEY).status == 405


def test_instances_filter_by_name_status_prefix_and_page(host: HostProcess) -> None:
    for n in range(3):
        settled(host, start(host, "hello_sequence", f"filt-hello-{n}"), "Completed")
    start(host, "approval", "filt-wait-0")
    settled(host, "filt-wait-0", "Running")

    by_name = api(host, "instances?prefix=filt-&name=hello_sequence")["instances"]
    running = api(host, "instances?prefix=filt-&status=Running")["instances"]
    first = api(host, "instances?prefix=filt-hello-&top=2")
    second = api(host, f"instances?prefix=filt-hello-&top=2&after={first['next']}")
    future = api(host, "instances?prefix=filt-&from=2999-01-01T00:00")["instances"]

    assert [i["instanceId"] for i in by_name] == [f"filt-hello-{n}" for n in range(3)]
    assert [i["instanceId"] for i in running] == ["filt-wait-0"]
    ids = [i["instanceId"] for i in first["instances"] + second["instances"]]
    assert ids == [f"filt-hello-{n}" for n in range(3)] and second["next"] is None
    assert future == []
    bad = host.get("/admin/dashboard/api/instances?status=Sleeping", headers=KEY)
    assert bad.status == 400 and "Sleeping" in bad.json()["message"]


def test_one_instance_with_history_and_entities_with_state(host: HostProcess) -> None:
    settled(host, start(host, "hello_sequence", "one-hello"), "Completed")
    resp = host.post(f"{WEBHOOK}/entities/counter/dash?op=add", 5, headers=KEY)
    assert resp.status == 202

    status = api(host, "instances/one-hello")
    entities = wait_for(
        lambda: [e for e in api(host, "entities?name=counter")["entities"] if e["key"] == "dash"],
        30,
        "the counter entity",
    )

    completed = [e for e in status["historyEvents"] if e["EventType"] == "TaskCompleted"]
    assert [e["FunctionName"] for e in completed] == ["say_hello"] * 3
    assert all(e["ScheduledTime"] <= e["Timestamp"] for e in completed)
    assert entities[0]["state"] == 5
    assert host.get("/admin/dashboard/api/instances/nope", headers=KEY).status == 404


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("api/instances?top=many", 400, ["top", "many"]),
        ("api/instances?top=0", 400, ["top", "'0'", "1 to 200"]),
        ("api/instances?top=201", 400, ["top", "'201'", "1 to 200"]),
        ("api/instances?top=-5", 400, ["top", "'-5'", "1 to 200"]),
        ("api/instances?from=yesterday", 400, ["yesterday"]),
        ("api/instances?status=Running,Sleeping", 400, ["Sleeping"]),
        ("api/entities?name=nothing", 404, ["nothing"]),
        ("api/entities", 404, ["entity"]),
        ("api/nowhere", 404, ["nowhere"]),
    ],
)
def test_bad_dashboard_queries_are_refused_with_a_message(
    host: HostProcess, path: str, status: int, words: list[str]
) -> None:
    resp = host.get(f"/admin/dashboard/{path}", headers=KEY)
    assert resp.status == status, resp.body
    body = resp.json()
    assert body["error"] == "dashboard"
    for word in words:
        assert word in body["message"], body


def js(value: str) -> str:
    return json.dumps(value)


def shown(tools: DevTools, expression: str, expected: Any, what: str) -> None:
    try:
        wait_for(lambda: tools.evaluate(expression) == expected, 30, what)
    except AssertionError as exc:
        page = tools.evaluate(
            "document.body.dataset.state + ' | ' + document.getElementById('message').textContent"
        )
        raise AssertionError(
            f"{exc}; the page: {page}; {expression} = {tools.evaluate(expression)!r}"
        ) from exc


@needs_chromium
def test_the_page_lists_shows_a_timeline_and_terminates_with_confirmation(
    host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = start(host, "hello_sequence", "page-hello")
    waiting = start(host, "approval", "page-wait")
    settled(host, done, "Completed")
    settled(host, waiting, "Running")

    browser.open(f"{host.base_url}/admin/dashboard?code={MASTER}")
    row = f"document.querySelector('tr[data-instance={js(done)}]')?.dataset.status ?? null"
    shown(browser, row, "Completed", "the instance in the list")
    assert browser.evaluate("location.search") == ""  # the key left the address bar
    list_shot = tmp_path / "dashboard-list.png"
    browser.screenshot(list_shot)

    browser.evaluate(f"location.hash = '#/instance/' + encodeURIComponent({js(done)}); true")
    bars = "[...document.querySelectorAll('#timeline .bar[data-kind=activity]')].map(b => b.dataset.name)"
    shown(browser, bars, ["say_hello"] * 3, "three activity bars")
    widths = browser.evaluate(
        "[...document.querySelectorAll('#timeline .bar')].map(b => b.getBoundingClientRect().width)"
    )
    assert all(w > 0 for w in widths)
    assert "Hello Tokyo!" in browser.evaluate("document.getElementById('i-output').textContent")
    timeline_shot = tmp_path / "dashboard-timeline.png"
    browser.screenshot(timeline_shot)

    browser.evaluate(f"location.hash = '#/instance/' + encodeURIComponent({js(waiting)}); true")
    view = "document.getElementById('instance-view').dataset"
    shown(
        browser, f"{view}.instance + ' ' + {view}.status", f"{waiting} Running", "the waiting one"
    )
    browser.evaluate("document.querySelector('#actions [data-action=terminate]').click(); true")
    shown(browser, "document.getElementById('confirm').open", True, "the confirmation dialog")
    browser.evaluate("document.getElementById('confirm-cancel').click(); true")
    shown(
        browser, "document.getElementById('message').textContent", "terminate cancelled", "cancel"
    )
    assert (
        host.get(f"{WEBHOOK}/instances/{waiting}", headers=KEY).json()["runtimeStatus"] == "Running"
    )

    browser.evaluate("document.querySelector('#actions [data-action=terminate]').click(); true")
    shown(browser, "document.getElementById('confirm').open", True, "the confirmation dialog")
    browser.evaluate(
        "document.getElementById('confirm-reason').value = 'from the page';"
        "document.getElementById('confirm-ok').click(); true"
    )
    shown(browser, f"{view}.status", "Terminated", "the page to show the terminated instance")
    final = host.get(f"{WEBHOOK}/instances/{waiting}", headers=KEY).json()
    assert final["runtimeStatus"] == "Terminated" and final["output"] == "from the page"
    action_shot = tmp_path / "dashboard-terminated.png"
    browser.screenshot(action_shot)
    with capsys.disabled():  # in the run's output even when pytest captures it
        print(f"\ndashboard screenshots: {list_shot} {timeline_shot} {action_shot}")
