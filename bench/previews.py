"""History size and replay cost of a turn with streaming previews on and off.

The same scripted turn runs twice on fresh hosts (SQLite store), once with ``AGENT_PREVIEWS=on``
(the model call streams; previews go to the preview store) and once with it off, against one
local OpenAI-compatible server that answers a plain request and a streamed one with the same
reply: ``--rounds - 1`` calculator rounds, then an answer of ``--words`` words, streamed one
word per chunk. For each run it reports:

* the history: events and bytes of every orchestration of the turn (the store's ``history``
  table) and the session entity's stored state in bytes;
* replay cost: the SDK replaying every one of those histories from the start, once per repeat,
  in this process (median of ``--repeat``), and the host's own episode replay p50;
* the preview writes (the ``seq`` the preview store reached) and the text chunks streamed.

Usage: ``python bench/previews.py [--rounds 3] [--words 400] [--repeat 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernel_client import kernel_env, submit, wait_final
from durable_host.core import wire
from durable_host.core.history import EventType
from durable_host.testing import WEBHOOK, HostProcess
from orchestrators import agent_round, agent_run, agent_turn, tool_task

HANDLES: dict[str, Callable[[str], str]] = {
    "agent_turn": agent_turn.agent_turn._function._func,
    "agent_run": agent_run.agent_run._function._func,
    "agent_round": agent_round.agent_round._function._func,
    "tool_task": tool_task.tool_task._function._func,
}
SESSION = "bench"


class ScriptedModel:
    """A chat-completions server on loopback: the same reply plain or streamed."""

    def __init__(self, rounds: int, words: int) -> None:
        self.rounds, self.words = rounds, words
        self.chunks = 0
        self.loop = asyncio.new_event_loop()
        self.base_url = ""

    def start(self) -> ScriptedModel:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait(10)
        return self

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._answer)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        ready.set()
        self.loop.run_forever()

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(1 for m in messages if m["role"] == "tool")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if done < self.rounds - 1:
            arguments = json.dumps({"expression": f"{done + 1}+{done + 1}"})
            message["tool_calls"] = [
                {
                    "id": f"call_{done}",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": arguments},
                }
            ]
        else:
            message["content"] = " ".join(f"word{i}" for i in range(self.words))
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = self.reply(body["messages"])
        if not body.get("stream"):
            return web.json_response(reply)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in self._chunks(reply):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.002)  # a model's pace, roughly: chunks arrive apart
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chunks(self, reply: dict[str, Any]) -> Iterator[dict[str, Any]]:
        head = {k: reply[k] for k in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"
        choice = reply["choices"][0]
        for word in re.findall(r"\s*\S+", choice["message"].get("content") or ""):
            self.chunks += 1
            yield {**head, "choices": [{"index": 0, "delta": {"content": word}}]}
        for i, call in enumerate(choice["message"].get("tool_calls") or []):
            yield {
                **head,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}}],
            }
        yield {
            **head,
            "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
        }
        yield {**head, "choices": [], "usage": reply["usage"]}


def stored_histories(db: Path, sub: str) -> list[dict[str, Any]]:
    """Every orchestration of the turn: id, name, input, parent and its history events."""
    with sqlite3.connect(db) as conn:
        parents = dict(conn.execute("SELECT instance_id, parent_instance_id FROM instances"))
        rows = conn.execute(
            "SELECT instance_id, event FROM history WHERE instance_id LIKE ? OR instance_id LIKE ?"
            " ORDER BY instance_id, seq",
            (f"{SESSION}:turn:{sub}%", f"{sub}:%"),
        ).fetchall()
    found: dict[str, list[dict[str, Any]]] = {}
    for instance_id, event in rows:
        found.setdefault(instance_id, []).append(json.loads(event))
    out = []
    for instance_id, events in found.items():
        started = next(e for e in events if e["EventType"] == EventType.EXECUTION_STARTED)
        out.append(
            {
                "instance_id": instance_id,
                "name": started["Name"],
                "input": started.get("Input"),
                "parent": parents.get(instance_id),
                "events": events,
            }
        )
    return out


def replay_requests(histories: list[dict[str, Any]]) -> list[tuple[Callable[[str], str], str]]:
    """What the SDK is handed to replay each history of the turn from its start."""
    return [
        (
            HANDLES[h["name"]],
            wire.encode_orchestration_request(
                h["instance_id"],
                [e for e in h["events"] if e["EventType"] != EventType.EXECUTION_COMPLETED],
                h["input"],
                h["parent"],
            ),
        )
        for h in histories
    ]


def replay_ms(runs: list[list[tuple[Callable[[str], str], str]]], repeat: int) -> list[float]:
    """Median milliseconds for the SDK to replay every history of each run once; the runs
    take turns (after one untimed warm-up each), so both meet the same machine."""
    times: list[list[float]] = [[] for _ in runs]
    for round_no in range(repeat + 1):
        for i, requests in enumerate(runs):
            started = time.perf_counter()
            for handle, request in requests:
                handle(request)
            if round_no:
                times[i].append(time.perf_counter() - started)
    return [statistics.median(t) * 1000 for t in times]


def one_run(model: ScriptedModel, previews: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-previews-"))
    db = tmp / "kernel.db"
    env = kernel_env(
        tmp,
        {
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_MODEL_NAME": "bench-model",
            "AGENT_PREVIEWS": "on" if previews else "off",
            "AGENT_PREVIEW_DIR": str(tmp / "previews"),
        },
    )
    host = HostProcess(ROOT, f"sqlite:{db}", env=env).start()
    try:
        chunks_before = model.chunks
        sub = submit(host, SESSION, "run the scripted turn")
        final = wait_final(host, SESSION, sub, timeout=300)
        assert final["status"] == "completed", final
        state = host.get(f"{WEBHOOK}/entities/session/{SESSION}").body
        metrics = host.get("/admin/host/metrics").json()
    finally:
        host.kill()
    histories = stored_histories(db, sub)
    writes = sum(json.loads(p.read_text())["seq"] for p in (tmp / "previews").rglob("*.json"))
    return histories, {
        "streaming": "on" if previews else "off",
        "events": sum(len(h["events"]) for h in histories),
        "history_bytes": sum(len(json.dumps(e)) for h in histories for e in h["events"]),
        "entity_bytes": len(state),
        "replay_ms": 0.0,  # measured for both runs together, below
        "host_replay_p50_ms": (metrics.get("replay_ms") or {}).get("p50"),
        "chunks": model.chunks - chunks_before,
        "preview_writes": writes,
    }


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


def masked(histories: list[dict[str, Any]]) -> str:
    """The histories with times and generated ids (the run's nonce) masked."""
    return _ID.sub("<id>", _TIME.sub("<time>", json.dumps(histories, sort_keys=True)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    model = ScriptedModel(args.rounds, args.words).start()
    runs = [one_run(model, previews) for previews in (False, True)]
    rows = [row for _, row in runs]
    medians = replay_ms([replay_requests(histories) for histories, _ in runs], args.repeat)
    for row, median in zip(rows, medians, strict=True):
        row["replay_ms"] = median
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---:|" * len(keys))
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    same = masked(runs[0][0]) == masked(runs[1][0])
    print(f"\nhistories equal once times and generated ids are masked: {same}")


if __name__ == "__main__":
    main()
