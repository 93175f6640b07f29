"""The session page's files panel in headless Chromium: the files of the committed snapshot
and the task that changed each, after a tool wrote them.

Needs Debian's ``chromium`` package; skipped without it.
"""

from __future__ import annotations

from pathlib import Path

from kernel.common import ids
from tests.app.turn_support import submit, wait_final
from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import HostProcess, wait_for

pytestmark = needs_chromium


def test_the_page_shows_the_files_and_the_task_that_changed_each(
    kernel_host: HostProcess,
    browser: DevTools,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    sub = submit(kernel_host, "ws-page", "write file notes/report.md: hello from the page test")
    assert wait_final(kernel_host, "ws-page", sub)["status"] == "completed"

    browser.open(f"{kernel_host.base_url}/api/sessions/ws-page/page")
    rows = "[...document.querySelectorAll('#workspace-files tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    wait_for(lambda: browser.evaluate(rows) or None, 30, "the files panel to fill")

    assert browser.evaluate(rows) == [["notes/report.md", "24", ids.tool_task_id(sub, 1, 0)]]
    href = "document.querySelector('#workspace-files tbody a').getAttribute('href')"
    assert browser.evaluate(href).endswith("/sessions/ws-page/workspace/files/notes/report.md")
