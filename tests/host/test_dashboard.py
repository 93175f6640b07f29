"""The dashboard at /admin/dashboard: its API (filters, orders, paging, counts per status, a
parent's sub-orchestrations and back, timer schedules, keys) and the page itself in headless
Chromium (newest first with counts, a parent and its children linked both ways, a timeline of
activities, a terminate confirmed in the page's dialog, the timer triggers with their next
run). Screenshots are saved in the test's tmp dir (and in docs/images/ by scripts/screenshots)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import APPS, WEBHOOK, HostProcess, wait_for
from tests.screenshots import save, window

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

    by_name = api(host, "instances?prefix=filt-&name=hello_sequence")
    oldest = api(host, "instances?prefix=filt-&name=hello_sequence&sort=oldest")["instances"]
    running = api(host, "instances?prefix=filt-&status=Running")["instances"]
    first = api(host, "instances?prefix=filt-hello-&top=2&sort=id")
    second = api(host, f"instances?prefix=filt-hello-&top=2&sort=id&after={first['next']}")
    newest = api(host, "instances?prefix=filt-hello-&top=2")
    rest = api(host, f"instances?prefix=filt-hello-&top=2&offset={newest['next']}")
    future = api(host, "instances?prefix=filt-&from=2999-01-01T00:00")["instances"]

    hellos = [f"filt-hello-{n}" for n in range(3)]  # started in this order
    assert by_name["sort"] == "newest" and by_name["complete"] is True  # newest first: default
    assert [i["instanceId"] for i in by_name["instances"]] == hellos[::-1]
    assert [i["instanceId"] for i in oldest] == hellos
    assert [i["instanceId"] for i in running] == ["filt-wait-0"]
    ids = [i["instanceId"] for i in first["instances"] + second["instances"]]
    assert ids == hellos and second["next"] is None
    ids = [i["instanceId"] for i in newest["instances"] + rest["instances"]]
    assert ids == hellos[::-1] and newest["next"] == "2" and rest["next"] is None
    assert future == []

    counts = api(host, "counts?prefix=filt-")
    assert counts["counts"]["Completed"] == 3 and counts["counts"]["Running"] == 1
    assert set(counts["counts"]) == set(api(host, "app")["statuses"])
    assert counts["total"] == 4 and counts["complete"] is True
    assert api(host, "counts?prefix=filt-&name=approval")["counts"]["Running"] == 1
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


def test_a_parent_lists_its_sub_orchestrations_and_each_names_its_parent(
    host: HostProcess,
) -> None:
    settled(host, start(host, "parent", "fam-1"), "Completed")

    parent = api(host, "instances/fam-1")
    children = parent["subOrchestrations"]
    assert parent["parentInstanceId"] is None
    assert [c["name"] for c in children] == ["hello_sequence", "chain"]
    assert children[0]["instanceId"] == "fam-1-child"  # the id it gave; chain's is generated
    assert [c["runtimeStatus"] for c in children] == ["Completed", "Completed"]
    assert parent["subOrchestrationCount"] == 2
    for child in children:
        back = api(host, f"instances/{child['instanceId']}")
        assert back["parentInstanceId"] == "fam-1" and back["subOrchestrations"] == []


@pytest.fixture(scope="module")
def timer_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    tmp = tmp_path_factory.mktemp("dashboard-timers")
    process = HostProcess(
        APPS / "timers",
        f"sqlite:{tmp / 'hub.db'}",
        env={"TICK_SCHEDULE": "0 0 3 * * *", "TIMER_APP_MARKS": str(tmp / "marks.jsonl")},
    ).start()
    yield process
    process.kill()


def next_three_am(now: datetime) -> datetime:
    today = now.replace(hour=3, minute=0, second=0, microsecond=0)
    return today if today > now else today + timedelta(days=1)


def test_timer_triggers_with_their_schedule_and_next_run(
    host: HostProcess, timer_host: HostProcess
) -> None:
    before = datetime.now(UTC)
    resp = timer_host.get("/admin/dashboard/api/timers")
    assert resp.status == 200, resp.body
    body = resp.json()
    (tick,) = body["timers"]
    assert tick["name"] == "tick" and tick["schedule"] == "0 0 3 * * *"
    assert tick["setting"] == "TICK_SCHEDULE" and tick["disabled"] is False
    assert tick["useMonitor"] is True and tick["runOnStartup"] is False
    assert tick["last"] is None
    expected = {next_three_am(before), next_three_am(datetime.now(UTC))}  # around a 03:00 edge
    assert datetime.fromisoformat(tick["next"]) in expected
    assert body["timeZone"] == "UTC"
    assert api(host, "timers")["timers"] == []  # an app without timer functions


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("api/instances?top=many", 400, ["top", "many"]),
        ("api/instances?top=0", 400, ["top", "'0'", "1 to 200"]),
        ("api/instances?top=201", 400, ["top", "'201'", "1 to 200"]),
        ("api/instances?top=-5", 400, ["top", "'-5'", "1 to 200"]),
        ("api/instances?from=yesterday", 400, ["yesterday"]),
        ("api/instances?status=Running,Sleeping", 400, ["Sleeping"]),
        ("api/instances?sort=sideways", 400, ["sort", "'sideways'", "newest, oldest, id"]),
        ("api/instances?offset=-1", 400, ["offset", "'-1'", "negative"]),
        ("api/instances?offset=two", 400, ["offset", "'two'", "not a number"]),
        ("api/instances?sort=oldest&after=abc", 400, ["after", "sort=id"]),
        ("api/instances?sort=id&offset=2", 400, ["offset", "sort=id"]),
        ("api/counts?from=yesterday", 400, ["yesterday"]),
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
    window(browser)
    row = f"document.querySelector('tr[data-instance={js(done)}]')?.dataset.status ?? null"
    shown(browser, row, "Completed", "the instance in the list")
    assert browser.evaluate("location.search") == ""  # the key left the address bar
    list_shot = tmp_path / "dashboard-list-all.png"
    browser.screenshot(list_shot)

    browser.evaluate(f"location.hash = '#/instance/' + encodeURIComponent({js(done)}); true")
    bars = "[...document.querySelectorAll('#timeline .bar[data-kind=activity]')].map(b => b.dataset.name)"
    shown(browser, bars, ["say_hello"] * 3, "three activity bars")
    widths = browser.evaluate(
        "[...document.querySelectorAll('#timeline .bar')].map(b => b.getBoundingClientRect().width)"
    )
    assert all(w > 0 for w in widths)
    assert "Hello Tokyo!" in browser.evaluate("document.getElementById('i-output').textContent")
    timeline_shot = save(browser, tmp_path, "dashboard-timeline")

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


ROWS = "[...document.querySelectorAll('#instances tbody tr')].map(tr => tr.dataset.instance)"
COUNT = "document.querySelector('#counts button[data-status={}]')?.dataset.count ?? null"


@needs_chromium
def test_the_page_orders_counts_links_parents_and_children_and_shows_timers(
    host: HostProcess,
    timer_host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    for n in range(3):
        settled(host, start(host, "hello_sequence", f"order-{n}"), "Completed")
    settled(host, start(host, "parent", "order-parent"), "Completed")
    start(host, "approval", "order-wait")
    settled(host, "order-wait", "Running")
    # the parent's first child has an id of the prefix (its second a generated one)
    started = ["order-0", "order-1", "order-2", "order-parent", "order-parent-child", "order-wait"]

    browser.open(f"{host.base_url}/admin/dashboard?code={MASTER}")
    window(browser)
    shown(browser, "document.body.dataset.state", "ready", "the page to be ready")
    browser.evaluate("document.getElementById('f-prefix').value = 'order-'; true")
    browser.evaluate("document.querySelector('#filters button[type=submit]').click(); true")
    shown(browser, ROWS, started[::-1], "the instances, newest first")
    shown(browser, COUNT.format("Completed"), "5", "the count of completed ones")
    assert browser.evaluate(COUNT.format("Running")) == "1"
    assert browser.evaluate(COUNT.format("Failed")) == "0"  # every status, even when none
    assert browser.evaluate("document.getElementById('counts').dataset.total") == "6"
    save(browser, tmp_path, "dashboard-list")

    browser.evaluate("document.querySelector('#counts button[data-status=Running]').click(); true")
    shown(browser, ROWS, ["order-wait"], "the list filtered by the count's status")
    browser.evaluate("document.querySelector('#counts button[data-status=Running]').click(); true")
    shown(browser, ROWS, started[::-1], "the filter taken off again")
    browser.evaluate(
        "const s = document.getElementById('f-sort'); s.value = 'id';"
        "s.dispatchEvent(new Event('change')); true"
    )
    shown(browser, ROWS, sorted(started), "the instances in id order")

    # From the parent to a child and back.
    browser.evaluate("location.hash = '#/instance/order-parent'; true")
    kids = (
        "[...document.querySelectorAll('#i-children tr[data-child]')].map(tr => tr.dataset.child)"
    )
    shown(browser, f"{kids}.length", 2, "the parent's two sub-orchestrations")
    assert browser.evaluate(kids)[0] == "order-parent-child"
    assert browser.evaluate("document.getElementById('i-parent').textContent") == ""
    save(browser, tmp_path, "dashboard-family")
    browser.evaluate("document.querySelector('#i-children a[data-instance]').click(); true")
    view = "document.getElementById('instance-view').dataset.instance"
    shown(browser, view, "order-parent-child", "the child's page")
    assert browser.evaluate(f"{kids}.length") == 0
    assert browser.evaluate("document.getElementById('i-parent').dataset.parent") == "order-parent"
    browser.evaluate("document.querySelector('#i-parent a').click(); true")
    shown(browser, view, "order-parent", "back to the parent")

    # The timer triggers of an app that has them, with their next run.
    browser.open(f"{timer_host.base_url}/admin/dashboard#/timers")
    window(browser)
    tick = "document.querySelector('tr[data-timer=tick]')"
    expected = next_three_am(datetime.now(UTC))
    shown(browser, f"{tick}?.querySelector('td.next').textContent ?? null",
          expected.strftime("%Y-%m-%d %H:%M:%S"), "the tick timer's next run")  # fmt: skip
    assert "0 0 3 * * *" in browser.evaluate(f"{tick}.textContent")
    assert "%TICK_SCHEDULE%" in browser.evaluate(f"{tick}.textContent")
    save(browser, tmp_path, "dashboard-timers")
