"""What one orchestration step costs at 10, 100 and 1,000 steps of history, with and without
the replay optimisations, measured in one run.

An in-process engine on a fresh SQLite store runs the parity app's ``long_chain``: N
activity steps (built with every optimisation on, to save time), then R more steps in each
mode: ``plain`` (the SDK replays the whole stored history, re-read from the store),
``fast`` (replay.py: only the events the SDK reads, fast timestamps, the history cache) and
``session`` (the default configuration: fast + incremental replay, sessions.py: the SDK's
live orchestration and the host's action walk continue from the last step; only the new
events and actions are handled). A session also replays in full whenever the history has
doubled since its last full replay; those episodes are rare (about one per doubling) and the
medians here leave them out, while ``bench/run.py``'s chain, which times every step, counts
them. A step's cost is the engine's own timing of the
episode that takes in an activity's result: attempt (the poison counter's write) + load
(status row + history, from the store or the history cache) + replay (the pure episode: the
SDK's replay and the host's decisions) + commit. Medians; ratios are plain / mode.

Usage: ``python bench/replay_cost.py [--steps 10,100,1000] [--measure 9] [--modes plain,fast,session]``
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

from durable_host.engine.client import DurableClient
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader
from durable_host.store.sqlite.store import SqliteStore

APP = ROOT / "tests" / "apps" / "parity"
PHASES = ("attempt", "load", "replay", "commit")


async def wait_episodes(engine: Engine, count: int, timeout: float) -> None:
    """Until the engine has run ``count`` episodes (polls a counter: the store stays idle)."""
    deadline = time.monotonic() + timeout
    while engine.stats["episodes"] < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} episodes not reached in {timeout}s")
        await asyncio.sleep(0.01)
    while engine.metrics()["ready"] or engine.metrics()["running_activities"]:
        await asyncio.sleep(0.01)  # the last activity's result is in


async def measure(
    engine: Engine, client: DurableClient, instance_id: str, count: int
) -> dict[str, float]:
    """Median per-phase milliseconds of the next ``count`` activity-result episodes."""
    for deque_ in engine.timings.values():
        deque_.clear()
    episodes = engine.stats["episodes"]
    await client.raise_event(instance_id, "more", json.dumps(count))
    await wait_episodes(engine, episodes + count + 1, 120)
    result = {}
    for phase in PHASES:
        # The first episode takes the "more" event, not an activity result: skip it.
        values = list(engine.timings[phase])[1:] or list(engine.timings[phase])
        result[phase] = statistics.median(values) * 1000
    result["total"] = sum(result[p] for p in PHASES)
    return result


MODES = {"plain": (False, False), "fast": (True, False), "session": (True, True)}


async def one_length(
    steps: int, count: int, folder: Path, modes: list[str]
) -> tuple[int, dict[str, dict[str, float]]]:
    config = config_mod.load(APP)
    store = SqliteStore(folder / f"replay-{steps}.db")
    await store.open()
    engine = Engine(loader.load_app(APP), store, config, fast_replay=True, poison_attempts=5)
    client = DurableClient(engine)
    await engine.start()
    instance_id = f"chain-{steps}"
    results: dict[str, dict[str, float]] = {}
    try:
        await client.start("long_chain", instance_id, json.dumps({"steps": steps}))
        print(f"  building {steps} steps", end="", flush=True)
        started = time.monotonic()
        await wait_episodes(engine, steps + 1, 600)
        print(f" ({time.monotonic() - started:.1f}s)", flush=True)
        for mode in modes:
            fast, live = MODES[mode]
            engine.set_fast_replay(fast, with_sessions=live)
            results[mode] = await measure(engine, client, instance_id, count)
        events = len(await store.get_history(instance_id))
    finally:
        await engine.stop(1.0)
        await store.close()
    return events, results


def table(results: list[tuple[int, int, dict[str, dict[str, float]]]]) -> None:
    print("\nper-step cost in ms (median of the measured steps)")
    print(
        f"{'steps':>6} {'events':>7} {'mode':>8} "
        + " ".join(f"{p:>8}" for p in (*PHASES, "total"))
        + f" {'plain/mode':>11}"
    )
    for steps, events, by_mode in results:
        plain = by_mode["plain"]["total"] if "plain" in by_mode else float("nan")
        for mode, phases in by_mode.items():
            cells = " ".join(f"{phases[p]:>8.2f}" for p in (*PHASES, "total"))
            print(f"{steps:>6} {events:>7} {mode:>8} {cells} {plain / phases['total']:>10.1f}x")
    first, last = results[0], results[-1]
    growth = {mode: last[2][mode]["total"] / first[2][mode]["total"] for mode in last[2]}
    print(
        f"\ncost growth from {first[0]} to {last[0]} steps: "
        + ", ".join(f"{mode} {value:.1f}x" for mode, value in growth.items())
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="10,100,1000")
    parser.add_argument("--measure", type=int, default=9, help="steps measured per mode")
    parser.add_argument("--modes", default=",".join(MODES), help="of " + ", ".join(MODES))
    args = parser.parse_args()
    lengths = [int(s) for s in args.steps.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for steps in lengths:
            results.append((steps, *await one_length(steps, args.measure, Path(tmp), modes)))
    table(results)


if __name__ == "__main__":
    asyncio.run(main())
