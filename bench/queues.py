"""Benchmark the queue trigger: messages per second and enqueue-to-start latency, one host and two.

An in-memory Azurite (started here, free ports), the app in ``bench/queues_app`` (one
queue-triggered function that only notes when its message was sent and when it started), the
extension's default ``batchSize`` (16) and ``newBatchThreshold``, ``maxPollingInterval`` 2 s.
For 1 host and for 2 hosts on one queue (task hubs in SQLite, one file each), two phases of
``--messages`` (2,000) messages each, sent from 8 threads:

* drain: the messages wait in the queue before the hosts start; messages/s is their count over
  the time from the first start to the last (what the hosts can take);
* live: as many again are sent while the hosts listen; enqueue-to-start latency p50 / p99
  (send time in the body, start time in the function; one clock, one machine). The send rate
  is printed too: when the hosts keep up, the latency is the listener's, not a backlog's.

It also checks that every message ran exactly once and prints each host's share.

Usage: ``python bench/queues.py [--messages 2000] [--hosts 1,2]``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueClient, QueueServiceClient

from durable_host.ops import azurite
from durable_host.testing import HostProcess

APP = ROOT / "bench" / "queues_app"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def send_all(queue: QueueClient, first: int, count: int) -> float:
    """Send ``count`` messages from 8 threads; the seconds it took."""

    def send(i: int) -> None:
        body = json.dumps({"i": i, "sent": time.time()})
        queue.send_message(base64.b64encode(body.encode()).decode())

    began = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(first, first + count)))
    return time.time() - began


def wait_lines(log: Path, count: int, label: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 600
    while True:
        lines = log.read_text().splitlines()
        print(f"  {label}: {len(lines)}/{count} started", end="\r", flush=True)
        if len(lines) >= count:
            print()
            return [json.loads(line) for line in lines]
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(lines)} of {count} messages ran within 600 s")
        time.sleep(0.5)


def run(connection: str, hosts: int, messages: int, folder: Path) -> dict[str, Any]:
    log = folder / f"runs-{hosts}.jsonl"
    log.touch()
    queue = QueueServiceClient.from_connection_string(connection).get_queue_client("bench")
    with contextlib.suppress(ResourceExistsError):
        queue.create_queue()
    queue.clear_messages()
    print(f"  {hosts} host(s): sending {messages} messages before the hosts start", flush=True)
    prefill = send_all(queue, 0, messages)
    env = {"BenchStorage": connection, "QUEUE_BENCH_LOG": str(log)}
    processes = [
        HostProcess(
            APP,
            f"sqlite:{folder / f'hub-{hosts}-{i}.db'}",
            env=dict(env),
            log_path=folder / f"host-{hosts}-{i}.log",
        ).start()
        for i in range(hosts)
    ]
    try:
        drained = wait_lines(log, messages, f"{hosts} host(s), drain")
        live = send_all(queue, messages, messages)
        rows = wait_lines(log, 2 * messages, f"{hosts} host(s), live")
    finally:
        for process in processes:
            process.stop()
    starts = [r["started"] for r in drained]
    latencies = [(r["started"] - r["sent"]) * 1000 for r in rows if r["i"] >= messages]
    per_host: dict[int, int] = {}
    for r in rows:
        per_host[r["pid"]] = per_host.get(r["pid"], 0) + 1
    return {
        "hosts": hosts,
        "once": len({r["i"] for r in rows}) == len(rows) == 2 * messages,
        "send_per_s": round(messages / prefill, 1),
        "drain_per_s": round(messages / (max(starts) - min(starts)), 1),
        "live_send_per_s": round(messages / live, 1),
        "p50_ms": round(percentile(latencies, 0.5), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "shares": sorted(per_host.values(), reverse=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--hosts", default="1,2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        folder = Path(tmp)
        blob, queue, table = azurite.free_ports(3)
        emulator = azurite.start(
            None, (blob, queue, table), in_memory=True, log=folder / "azurite.log"
        )
        try:
            results = [
                run(emulator.connection_string, int(n), args.messages, folder)
                for n in args.hosts.split(",")
            ]
        finally:
            emulator.stop()
    print(
        f"{'hosts':>5} {'once':>5} {'send/s':>7} {'drain msg/s':>11} {'live send/s':>11}"
        f" {'p50 ms':>8} {'p99 ms':>8}  per host"
    )
    for r in results:
        print(
            f"{r['hosts']:>5} {r['once']!s:>5} {r['send_per_s']:>7} {r['drain_per_s']:>11}"
            f" {r['live_send_per_s']:>11} {r['p50_ms']:>8} {r['p99_ms']:>8}  {r['shares']}"
        )


if __name__ == "__main__":
    main()
