"""The live session page in headless Chromium, driven over the DevTools protocol.

The page is opened before the session exists; then submissions (over the API and through the
page's own form), a document and a child task are committed, and the page must show each of
them - submissions with their answers, entries, documents, the task graph with statuses - by
following the change stream alone, having seen every change record exactly once. A second
test reads a page as people do: a page opened on a quiet session says ``live`` at once (not
after a long poll), a dropped connection is said and recovered from, a tool call is one card
(tool, arguments, outcome, replay policy, tier) with its entries' JSON behind a toggle, and a
long answer wraps inside its cell.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel.common import ids
from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import WEBHOOK, HostProcess, wait_for
from tests.screenshots import save, window

pytestmark = needs_chromium
SESSION = "pagetest"


def js(value: str) -> str:
    return json.dumps(value)


def row(sub_id: str, what: str) -> str:
    return f"document.querySelector('tr[data-submission={js(sub_id)}]')?.{what} ?? null"


def shown(tools: DevTools, expression: str, expected: Any, what: str, timeout: float = 60) -> None:
    wait_for(lambda: tools.evaluate(expression) == expected, timeout, what)


def test_the_page_follows_a_session_live(
    kernel_host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser.open(f"{kernel_host.base_url}/api/sessions/{SESSION}/page")
    shown(
        browser, "document.getElementById('session-id')?.textContent ?? null", SESSION, "the page"
    )
    shown(
        browser,
        "document.body?.dataset.state ?? null",
        "no session yet",
        "the page to find no session",
    )

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
    browser.screenshot(tmp_path / "session-page-follow.png")


def card(call_id: str, what: str) -> str:
    return f"document.querySelector('li.tool-card[data-tool-call={js(call_id)}]')?.{what} ?? null"


def field(call_id: str, name: str) -> str:
    return card(call_id, f"querySelector('dd[data-field={js(name)}]').textContent")


LONG_WORD = "https://example.org/" + "a-long-path-segment/" * 6  # 140 characters, no break
STATE = "document.body?.dataset.state ?? null"  # null while the page is still loading
DETAIL = "document.getElementById('connection-detail').textContent"


def test_the_page_reads_as_cards_wraps_answers_and_says_when_it_is_live(
    kernel_host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    session = "pagecards"
    asked = kernel_host.post(
        f"/api/sessions/{session}/submissions", {"requestId": "c1", "text": "calculate 6*7"}
    ).json()["submissionId"]
    long_text = (
        f"read {LONG_WORD} and tell me whether the answer column wraps this long request,"
        " which goes on for a while so that its echo needs several lines in its cell"
    )
    echoed = kernel_host.post(
        f"/api/sessions/{session}/submissions", {"requestId": "c2", "text": long_text}
    ).json()["submissionId"]

    def final() -> bool:
        subs = kernel_host.get(f"/api/sessions/{session}").json()["submissions"]
        return all(subs.get(s, {}).get("status") == "completed" for s in (asked, echoed))

    wait_for(final, 60, "both submissions to complete")

    # An up-to-date page on a quiet session: live as soon as the stream answers, well before
    # the 25 s a long poll of the change stream would take.
    browser.open(f"{kernel_host.base_url}/api/sessions/{session}/page")
    window(browser, height=1200)
    shown(browser, STATE, "live", "the page to say live", timeout=10)
    assert browser.evaluate(DETAIL).startswith("since ")

    view = kernel_host.get(f"/api/sessions/{session}").json()
    intent = next(e for e in view["entries"] if e["kind"] == "tool_intent")
    call_id, tool_task = intent["data"]["tool_call_id"], intent["data"]["tool_task_id"]
    folded = [
        e["n"] for e in view["entries"] if (e.get("data") or {}).get("tool_call_id") == call_id
    ]
    assert len(folded) == 3  # intent, outcome, result: one card
    cards = f"document.querySelectorAll('[data-tool-call={js(call_id)}]').length"
    assert browser.evaluate(cards) == 1
    assert browser.evaluate(card(call_id, "dataset.entries")) == ",".join(map(str, folded))
    assert browser.evaluate(card(call_id, "dataset.tool")) == "calculator"
    assert browser.evaluate(card(call_id, "dataset.outcome")) == "ok"
    assert browser.evaluate(field(call_id, "arguments")) == "expression6*7"
    assert browser.evaluate(field(call_id, "outcome")).startswith("ok")
    assert browser.evaluate(field(call_id, "replay policy")) == "safe"
    assert "42" in browser.evaluate(field(call_id, "result"))
    assert browser.evaluate(field(call_id, "tier")) == "-"
    # The raw JSON is there, folded away until asked for.
    raw = "(" + card(call_id, "querySelector('details.raw')") + ")"
    assert browser.evaluate(f"{raw}.open") is False
    browser.evaluate(f"{raw}.querySelector('summary').click(); true")
    assert browser.evaluate(f"{raw}.open") is True
    shown_json = json.loads(browser.evaluate(f"{raw}.querySelector('pre').textContent"))
    assert [e["kind"] for e in shown_json] == ["tool_intent", "tool_outcome", "message"]
    browser.evaluate(f"{raw}.open = false; true")

    # The tier a failure policy gave the tool task shows on its card.
    resp = kernel_host.post(
        f"{WEBHOOK}/entities/session/{session}?op=commit",
        {"tasks": [{"id": tool_task, "tier": "retried"}]},
    )
    assert resp.status == 202
    shown(browser, field(call_id, "tier"), "retried", "the tier on the card")

    # The long answer wraps: no cell of its row is wider than its box, the table fits.
    overflow = (
        f"[...document.querySelector('tr[data-submission={js(echoed)}]').cells]"
        ".map(td => td.scrollWidth - td.clientWidth)"
    )
    assert all(extra <= 1 for extra in browser.evaluate(overflow)), browser.evaluate(overflow)
    fits = (
        "document.getElementById('submissions').scrollWidth"
        " <= document.getElementById('submissions-section').clientWidth"
    )
    assert browser.evaluate(fits) is True
    answer = f"document.querySelector('tr[data-submission={js(echoed)}] td.answer')"
    assert LONG_WORD in browser.evaluate(f"{answer}.textContent")
    assert browser.evaluate(f"{answer}.getBoundingClientRect().height") > 40  # several lines
    save(browser, tmp_path, "session-page")

    # The connection drops (every request fails) while a change arrives: the page says so,
    # and says it is live again once requests go through.
    browser.evaluate(
        "window.realFetch = window.fetch;"
        "window.fetch = () => Promise.reject(new TypeError('network down for the test')); true"
    )
    kernel_host.post(
        f"/api/sessions/{session}/submissions", {"requestId": "c3", "text": "one more"}
    )
    shown(browser, STATE, "reconnecting", "the page to say it lost the connection", timeout=30)
    assert "network down for the test" in browser.evaluate(DETAIL)
    browser.evaluate("window.fetch = window.realFetch; true")
    shown(browser, STATE, "live", "the page to be live again", timeout=15)
    assert browser.evaluate(DETAIL).startswith("reconnected at ")
    shown(
        browser,
        "[...document.querySelectorAll('#submissions tbody tr')].map(tr => tr.dataset.status)",
        ["completed"] * 3,
        "the change made during the drop",
    )
