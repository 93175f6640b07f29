"""The requirement files keep their jobs apart and agree where they overlap."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[A-Za-z0-9_,.-]+\])?==(\S+)$")  # extras allowed


def pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return {m[1].lower(): m[2] for m in map(PIN.match, (line.strip() for line in lines)) if m}


def test_the_host_requirements_do_not_pull_in_the_app():
    text = (ROOT / "requirements-host.txt").read_text()

    assert "-r requirements.txt" not in text
    assert not {"openai", "pydantic"} & set(pins("requirements-host.txt"))


def test_the_sdk_pins_of_host_and_app_agree():
    host, app = pins("requirements-host.txt"), pins("requirements.txt")

    shared = set(host) & set(app)

    assert {"azure-functions", "azure-functions-durable"} <= shared
    assert {name: host[name] for name in shared} == {name: app[name] for name in shared}


def test_every_requirement_is_pinned():
    for name in (
        "requirements.txt",
        "requirements-host.txt",
        "requirements-dev.txt",
        "examples/openai_agents/requirements.txt",
        "examples/agent_framework/requirements.txt",
    ):
        for line in (ROOT / name).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "-r ")):
                assert PIN.match(line), f"{name}: {line!r} is not pinned with =="
