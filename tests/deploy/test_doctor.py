"""Deploy readiness: ``azure-functions-doctor`` finds no failure in the repository's app.

It runs the doctor's full rule set on the repository root for the two plans the app is
documented for (docs/deploy.md) and reads its JSON report. Warnings are allowed (they are about
this machine: no Core Tools, no local.settings.json, no Application Insights); each failure is
named in the assertion message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

DOCTOR = Path(sys.executable).with_name("azure-functions-doctor")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("plan", ["flex-consumption", "premium"])
def test_the_doctor_finds_no_failure(tmp_path: Path, plan: str) -> None:
    doctor = str(DOCTOR) if DOCTOR.exists() else shutil.which("azure-functions-doctor")
    assert doctor, "azure-functions-doctor is not installed (requirements-dev.txt)"
    report, summary = tmp_path / "report.json", tmp_path / "summary.json"
    subprocess.run(
        [doctor, "doctor", "--path", str(ROOT), "--profile", "full", "--hosting-plan", plan,
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
