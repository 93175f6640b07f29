"""Benchmark one long session: is turn 1,000 as fast as turn 1?

One host process (SQLite or Azure Storage through an in-memory Azurite), the offline planner
as the model. One session receives ``--submissions`` sequential submissions through the
sessions API, each "calculate i * 2 and then remember ni: value i" (two tool rounds and the
answer). For every submission it records the time from acceptance to completion (the
submission's own ``accepted_at`` / ``finished_at``, written by the session entity, so the
client's polling does not count), and at each checkpoint (10, 100, 1,000, ... turns) it prints:

* the median per-submission time of the last checkpoint window and ms per round (3 rounds);
* the session entity's stored state size in bytes (the head: what every operation reads and
  the host writes);
* the host's entity batch p50 (``/admin/host/metrics``).

At the end: the median of the first 50 and of the last 50 submissions and their ratio.

Usage: ``python bench/session_scale.py [--store sqlite|azure] [--submissions 1000]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernel_client import kernel_env, submit, wait_final
from durable_host.testing import HostProcess

ROUNDS_PER_SUBMISSION = 3  # calculate, remember, answer
SESSION = "scale"


def state_bytes(host: HostProcess, session: str) -> int:
    url = f"{host.base_url}/runtime/webhooks/durabletask/entities/session/{session}"
    with urllib.request.urlopen(url) as response:
        body = json.loads(response.read())
    return len(json.dumps(body, separators=(",", ":")))


def entity_batch_p50(host: HostProcess) -> float:
    metrics = json.loads(urllib.request.urlopen(host.base_url + "/admin/host/metrics").read())
    return float((metrics.get("entity_batch_ms") or {}).get("p50", float("nan")))


def seconds(start: str, end: str) -> float:
    parse = datetime.fromisoformat
    return (parse(end) - parse(start)).total_seconds()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "azure"), default="sqlite")
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--checkpoints", default="10,100,1000")
    parser.add_argument("--window", type=int, default=50, help="first/last window size")
    args = parser.parse_args()
    checkpoints = sorted(
        {int(c) for c in args.checkpoints.split(",") if int(c) <= args.submissions}
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-session-"))
    env = kernel_env(tmp)
    emulator = None
    if args.store == "azure":
        from durable_host import azurite

        emulator = azurite.start(
            None, azurite.free_ports(3), in_memory=True, log=tmp / "azurite.log"
        )
        env.update(AzureWebJobsStorage=emulator.connection_string, DURABLE_HOST_HUB="SessionScale")
        spec = "azure"
    else:
        spec = f"sqlite:{tmp / 'bench.db'}"
    host = HostProcess(ROOT, spec, env=env).start()
    times: list[float] = []
    print(
        f"{'turns':>6} {'ms/submission':>14} {'ms/round':>9} {'state bytes':>12} "
        f"{'entity batch p50 ms':>20}",
        flush=True,
    )
    try:
        started = time.perf_counter()
        last = 0
        for i in range(1, args.submissions + 1):
            sub = submit(
                host,
                SESSION,
                f"calculate {i} * 2 and then remember n{i}: value {i}",
                request_id=f"r{i}",
            )
            final = wait_final(host, SESSION, sub, timeout=300)
            assert final["status"] == "completed", final
            times.append(seconds(final["accepted_at"], final["finished_at"]) * 1000)
            if i in checkpoints:
                window = statistics.median(times[last:i])
                print(
                    f"{i:>6} {window:>14.1f} {window / ROUNDS_PER_SUBMISSION:>9.1f} "
                    f"{state_bytes(host, SESSION):>12} {entity_batch_p50(host):>20.3f}",
                    flush=True,
                )
                last = i
            elif i % 50 == 0:
                print(f"  ... {i} submissions, {time.perf_counter() - started:.0f} s", flush=True)
        assert host.process is not None
        status = Path(f"/proc/{host.process.pid}/status").read_text()
        rss = int(status.split("VmHWM:")[1].split()[0]) / 1024
    finally:
        host.kill()
        if emulator is not None:
            emulator.stop()
    w = min(args.window, len(times) // 2) or 1
    first, last_ = statistics.median(times[:w]), statistics.median(times[-w:])
    print(
        f"\nstore {args.store}, {len(times)} submissions of one session; host peak RSS {rss:.0f} MiB"
    )
    print(
        f"median of the first {w}: {first:.1f} ms, of the last {w}: {last_:.1f} ms, "
        f"ratio {last_ / first:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
