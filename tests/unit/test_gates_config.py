"""The pre-commit hooks stay a valid configuration that runs the same tools as scripts/gates,
from the project's environment (nothing downloaded)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".pre-commit-config.yaml"

yaml = pytest.importorskip("yaml", reason="needs PyYAML (installed with pre-commit)")


def hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load(CONFIG.read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_pre_commit_accepts_the_configuration() -> None:
    pytest.importorskip("pre_commit", reason="needs pre-commit (requirements-dev.txt)")
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hook_is_local_and_runs_a_tool_of_the_project_environment() -> None:
    config = yaml.safe_load(CONFIG.read_text())

    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    for hook in hooks():
        assert hook["language"] == "system", hook["id"]
        tool = shlex.split(hook["entry"])[0]
        assert tool.startswith(".venv/bin/"), hook["id"]


def test_the_hooks_run_what_the_gates_run() -> None:
    gates = (ROOT / "scripts" / "gates").read_text()
    commands = [" ".join(shlex.split(hook["entry"])[:2]) for hook in hooks()]

    assert commands == [".venv/bin/ruff format", ".venv/bin/ruff check", ".venv/bin/mypy"]
    for command in commands:
        assert command in gates
