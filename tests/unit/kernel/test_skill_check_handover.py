"""``register_skill`` checks its skill through the validator ``kernel.skills.skill`` hands to the
catalogue on import (the catalogue cannot import skills: skills imports it). Without it the
tool refuses every call instead of accepting a skill nobody checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SKILL = {
    "name": "s",
    "steps": [{"id": "a", "kind": "tool", "tool": "calculator", "arguments": {"expression": "1"}}],
}


def _validate_in_a_fresh_process(*modules: str) -> list[object]:
    """``validate_call('register_skill')`` in a new interpreter that imported ``modules``."""
    code = "\n".join(
        [
            "import json, sys",
            *(f"import {m}" for m in modules),
            "from kernel import tools",
            f"skill = json.loads({json.dumps(json.dumps(SKILL))})",
            "ok, out = tools.validate_call('register_skill', {'skill': skill})",
            "print(json.dumps([ok, out]))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_register_skill_accepts_a_valid_skill_once_skills_is_loaded() -> None:
    ok, args = _validate_in_a_fresh_process("kernel.skills.skill")

    assert ok is True
    assert args == {"skill": SKILL}


def test_register_skill_refuses_every_call_while_skills_is_not_loaded() -> None:
    ok, error = _validate_in_a_fresh_process()

    assert ok is False
    assert isinstance(error, dict)
    assert error["kind"] == "invalid_arguments"
    assert error["field"] == "skill"
    assert "kernel.skills.skill is not loaded" in error["message"]
