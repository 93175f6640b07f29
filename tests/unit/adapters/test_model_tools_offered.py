"""A model call offers the tools a loop declared, and the whole catalogue otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from activities import model
from kernel.turn import tools


async def _offered(monkeypatch: pytest.MonkeyPatch, allowed: list[str] | None) -> list[str]:
    seen: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(
            {
                "model": "m1",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    monkeypatch.setenv("AGENT_MODEL_BASE_URL", f"http://127.0.0.1:{port}/v1")
    try:
        result = await model.ask(
            [{"n": 1, "role": "user", "text": "hi"}], 10.0, allowed_tools=allowed
        )
    finally:
        await runner.cleanup()
    assert result.to_dict()["ok"], result.to_dict()
    assert len(seen) == 1
    return [spec["function"]["name"] for spec in seen[0].get("tools", [])]


def test_a_loop_run_offers_only_its_declared_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    assert asyncio.run(_offered(monkeypatch, ["calculator"])) == ["calculator"]


def test_without_a_declaration_every_tool_is_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    assert asyncio.run(_offered(monkeypatch, None)) == list(tools.TOOLS)
