"""The live session page in headless Chromium, driven over the DevTools protocol.

The page is opened before the session exists; then submissions (over the API and through the
page's own form), a document and a child task are committed, and the page must show each of
them - submissions with their answers, entries, documents, the task graph with statuses - by
following the change stream alone, having seen every change record exactly once.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel import ids
from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import WEBHOOK, HostProcess, wait_for

pytestmark = needs_chromium
SESSION = "pagetest"


def js(value: str) -> str:
    return json.dumps(value)


def row(sub_id: str, what: str) -> str:
    return f"document.querySelector('tr[data-submission={js(sub_id)}]')?.{what} ?? null"


def shown(tools: DevTools, expression: str, expected: Any, what: str) -> None:
    wait_for(lambda: tools.evaluate(expression) == expected, 60, what)


def test_the_page_follows_a_session_live(
    kernel_host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser.open(f"{kernel_host.base_url}/api/sessions/{SESSION}/page")
    shown(
        browser, "document.getElementById('session-id')?.textContent ?? null", SESSION, "the page"
    )
    shown(browser, "document.body.dataset.state", "no session yet", "the page to find no session")

    sub_id = kernel_host.post(
        f"/api/sessions/{SESSION}/submissions", {"requestId": "r1", "text": "hello page"}
    ).json()["submissionId"]
    shown(browser, row(sub_id, "dataset.status"), "completed", "the submission to complete")
    assert (
        browser.evaluate(row(sub_id, "querySelector('td.answer').textContent"))
        == 'You said: "hello page" (2 words).'
    )
    turn = ids.turn_instance_id(SESSION, sub_id)
    assert (
        browser.evaluate(f"document.querySelector('li[data-task={js(turn)}]').dataset.status")
        == "completed"
    )
    roles = "[...document.querySelectorAll('#entries li')].map(li => li.dataset.role)"
    assert browser.evaluate(roles) == ["user", "assistant"]

    child = f"{turn}:check"
    note = {"id": "plan", "type": "note", "data": {"title": "Plan", "text": "ship it"}}
    task = {"id": child, "kind": "check", "parent": turn, "status": "running", "phase": "verify",
            "tier": "retried"}  # fmt: skip
    resp = kernel_host.post(
        f"{WEBHOOK}/entities/session/{SESSION}?op=commit", {"documents": [note], "tasks": [task]}
    )
    assert resp.status == 202
    nested = f"document.querySelector('li[data-task={js(turn)}] li[data-task={js(child)}]')?.dataset.phase ?? null"
    shown(browser, nested, "verify", "the child task under its turn")
    tier = f"document.querySelector('li[data-task={js(child)}]').dataset.tier"
    assert browser.evaluate(tier) == "retried"  # the failure tier shows with the task
    assert "ship it" in browser.evaluate(
        "document.querySelector('[data-document=\"plan\"]').textContent"
    )

    browser.evaluate(
        "document.getElementById('ask-text').value = 'typed on the page';"
        "document.querySelector('#ask button').click(); true"
    )
    typed = (
        "[...document.querySelectorAll('#submissions tbody tr')]"
        ".filter(tr => tr.textContent.includes('typed on the page')).map(tr => tr.dataset.status)"
    )
    shown(browser, typed, ["completed"], "the page's own submission to complete")

    view = kernel_host.get(f"/api/sessions/{SESSION}").json()
    shown(
        browser,
        "Number(document.body.dataset.followCursor)",
        view["cursor"],
        "the page to catch up",
    )
    cursors = browser.evaluate(
        "[...document.querySelectorAll('#changes li')].map(li => Number(li.dataset.cursor))"
    )
    start = int(browser.evaluate("document.body.dataset.followedFrom"))
    assert sorted(cursors) == list(range(start + 1, view["cursor"] + 1))
    assert browser.evaluate("document.body.dataset.state") == "live"
    browser.screenshot(tmp_path / "session-page.png")
