"""Deploy readiness: ``azure-functions-doctor`` finds no failure in the repository's app.

It runs the doctor's full rule set on what a deployment ships - the repository's files less
what ``.funcignore`` excludes, copied out - for the two plans the app is documented for
(docs/deploy.md) and reads its JSON report. (Run on the repository root, the doctor also walks
the virtual environments and node_modules: ten times the time, for files no deployment holds.)
Warnings are allowed (they are about this machine: no Core Tools, no local.settings.json, no
Application Insights); each failure is named in the assertion message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pathspec
import pytest

from tests.harness import ROOT

DOCTOR = Path(sys.executable).with_name("azure-functions-doctor")


def deployed_copy(target: Path) -> Path:
    """The files a deployment of the repository ships (``.funcignore`` applied), in ``target``."""
    ignored = pathspec.GitIgnoreSpec.from_lines((ROOT / ".funcignore").read_text().splitlines())
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT)
        dirs[:] = [d for d in dirs if not ignored.match_file(f"{here / d}/")]
        for name in files:
            relative = here / name
            if not ignored.match_file(str(relative)):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / relative, target / relative)
    return target


@pytest.mark.timeout(120)
@pytest.mark.parametrize("plan", ["flex-consumption", "premium"])
def test_the_doctor_finds_no_failure(tmp_path: Path, plan: str) -> None:
    doctor = str(DOCTOR) if DOCTOR.exists() else shutil.which("azure-functions-doctor")
    assert doctor, "azure-functions-doctor is not installed (requirements-dev.txt)"
    report, summary = tmp_path / "report.json", tmp_path / "summary.json"
    app = deployed_copy(tmp_path / "app")
    assert (app / "function_app.py").is_file() and not (app / "tests").exists()
    # The schedule parser the app shares with the host ships with the app; the host does not.
    assert (app / "functions_schedules" / "__init__.py").is_file()
    assert not (app / "durable_host").exists()
    subprocess.run(
        [doctor, "doctor", "--path", str(app), "--profile", "full", "--hosting-plan", plan,
         "--format", "json", "--output", str(report), "--summary-json", str(summary)],
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    counts = json.loads(summary.read_text())
    failures = [
        f"{item['rule_id']}: {item['value']}"
        for section in json.loads(report.read_text())["results"]
        for item in section.get("items") or [section]
        if item.get("status") == "fail"
    ]
    print(f"\nazure-functions-doctor ({plan}): {counts}")
    assert counts["failed"] == 0, "\n".join(failures)
    assert counts["passed"] > 0
