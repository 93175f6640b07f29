"""Benchmark the MCP endpoint: ``tools/call`` of a trivial tool against a plain HTTP function.

One host process (SQLite store, keys off, on loopback) serving ``bench/mcp_app``: a tool that
returns its argument (``app.mcp_tool()``, a sync function: it runs on a worker thread, as an
HTTP function does) and an HTTP function that returns its body, the floor. For each, with
``--concurrency`` clients on one aiohttp session, it reports calls per second and the p50 and
p99 latency of ``--calls`` calls (after ``--warmup`` calls), and the host's peak RSS. The MCP
calls are Streamable HTTP POSTs with a session id from ``initialize``, each answered with one
SSE event, as the official clients send them.

Usage: ``python bench/mcp.py [--calls 2000] [--concurrency 1,8]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp

from durable_host.testing import HostProcess

APP = ROOT / "bench" / "mcp_app"
MCP = "/runtime/webhooks/mcp"
ACCEPT = "application/json, text/event-stream"


async def measure(
    base: str, kind: str, calls: int, concurrency: int, warmup: int
) -> dict[str, float]:
    async with aiohttp.ClientSession() as http:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if kind == "mcp":
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
            async with http.post(base + MCP, json=init, headers=headers) as resp:
                headers["Mcp-Session-Id"] = resp.headers["Mcp-Session-Id"]
                await resp.read()

        async def one(i: int) -> float:
            began = time.perf_counter()
            if kind == "mcp":
                body = {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": f"t{i}"}},
                }
                async with http.post(base + MCP, json=body, headers=headers) as resp:
                    text = await resp.text()
                    assert resp.status == 200 and f'"t{i}"' in text, text
            else:
                async with http.post(base + "/api/echo", data=f"t{i}") as resp:
                    assert resp.status == 200 and await resp.text() == f"t{i}"
            return time.perf_counter() - began

        for i in range(warmup):
            await one(i)
        latencies: list[float] = []
        queue = iter(range(calls))

        async def worker() -> None:
            for i in queue:
                latencies.append(await one(i))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "per_s": calls / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--concurrency", default="1,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host = HostProcess(APP, f"sqlite:{Path(tmp) / 'bench.db'}").start()
        try:
            rows = []
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                for kind in ("http", "mcp"):
                    print(f"  {kind} x{concurrency}: {args.calls} calls...", file=sys.stderr)
                    result = asyncio.run(
                        measure(host.base_url, kind, args.calls, concurrency, args.warmup)
                    )
                    rows.append((kind, concurrency, result))
            assert host.process is not None
            rss = peak_rss_mb(host.process.pid)
        finally:
            host.stop()
    print(f"{'endpoint':<28} {'clients':>7} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    floor: dict[int, float] = {}
    for kind, concurrency, r in rows:
        name = "HTTP function (floor)" if kind == "http" else "MCP tools/call"
        if kind == "http":
            floor[concurrency] = r["per_s"]
        ratio = "" if kind == "http" else f"  ({r['per_s'] / floor[concurrency]:.2f}x the floor)"
        print(
            f"{name:<28} {concurrency:>7} {r['per_s']:>9.0f} {r['p50_ms']:>8.2f}"
            f" {r['p99_ms']:>8.2f}{ratio}"
        )
    print(f"host peak RSS: {rss:.0f} MB")
    print(
        json.dumps({"rows": [(k, c, r) for k, c, r in rows], "peak_rss_mb": rss}), file=sys.stderr
    )


if __name__ == "__main__":
    main()
