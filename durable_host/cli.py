"""Command line: ``python -m durable_host start [--app-dir DIR] [--host H] [--port P] [--store S]
[--auth keys|off] [--public-url URL] [--exit-when-idle SECONDS [--wake-file PATH]]``,
``python -m durable_host keys [--app-dir DIR] [--store S] [--json]`` and
``python -m durable_host next-wake [--app-dir DIR] [--store S]``.

``--exit-when-idle``: stop (exit 0) once nothing has been runnable for that long, printing
one JSON line ``{"event": "idle-exit", "next_wake": ...}`` (and writing it to
``--wake-file``); ``next-wake`` prints the same answer for a stopped host
(``durable_host/wake.py``, ``docs/schedules.md``).

Prints one line ``durable host listening on http://H:P`` once it serves requests (tests
read the port from it when ``--port 0``), and stops cleanly on SIGTERM or SIGINT:
it stops taking work, gives running activities a grace period, and exits 0. A host whose
store is lost while it runs (``Host.fatal``) stops the same way, prints
``durable host: <reason>`` and exits 2, as a host that cannot start does. Logs go to
stderr, one record per line, each naming its instance (``--log-format text|json``).

``keys`` prints the host's keys (``durable_host/keys.py``) - creating them if the hub has
none yet, so a host started later uses the same ones. It opens the store read-only, so it
works beside a running host. It prints secrets to stdout on purpose; nothing is logged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from durable_host import config as config_mod
from durable_host import keys as keys_mod
from durable_host import loader, logs, timer_triggers, wake
from durable_host.host import STARTUP_ERRORS, Host, open_store


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m durable_host")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="serve a Durable Functions app")
    start.add_argument("--app-dir", default=".", type=Path)
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--port", default=7071, type=int)
    start.add_argument("--store", default=None, help="sqlite (default: <app>/.durable/<hub>.db), sqlite:PATH, or azure (AzureWebJobsStorage)")
    start.add_argument("--grace", default=10.0, type=float, help="seconds for running activities at shutdown")
    start.add_argument("--log-level", default="INFO")
    start.add_argument("--log-format", default="text", choices=("text", "json"))
    start.add_argument(
        "--auth",
        default=None,
        choices=("keys", "off"),
        help="require keys (default: keys unless the host binds only loopback)",
    )
    start.add_argument(
        "--public-url",
        default=None,
        help="the address clients reach the host at, for links (default: DURABLE_HOST_PUBLIC_URL,"
        " else the bound address)",
    )
    start.add_argument(
        "--exit-when-idle",
        default=None,
        type=_seconds,
        metavar="SECONDS",
        help="exit 0 when nothing has been runnable for SECONDS; print the next wake time",
    )
    start.add_argument("--wake-file", default=None, type=Path, help="also write it to this file")
    wake_cmd = sub.add_parser("next-wake", help="when a stopped host must run again (JSON)")
    wake_cmd.add_argument("--app-dir", default=".", type=Path)
    wake_cmd.add_argument("--store", default=None, help="as for start")
    keys = sub.add_parser("keys", help="show the host's keys (creating them once)")
    keys.add_argument("--app-dir", default=".", type=Path)
    keys.add_argument("--store", default=None, help="as for start")
    keys.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 10**9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


async def serve(args: argparse.Namespace) -> int:
    host = Host(
        args.app_dir, args.host, args.port, args.store, args.grace, args.auth, args.public_url,
        exit_when_idle=args.exit_when_idle,
    )
    try:
        await host.start()
    except STARTUP_ERRORS as exc:
        print(f"durable host: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if host.fatal is None:
        print(f"durable host listening on {host.base_url}", flush=True)
        stopped, idle = asyncio.create_task(stop.wait()), asyncio.create_task(host.idle.wait())
        await asyncio.wait((stopped, idle), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel(), idle.cancel()
    await host.stop()
    if host.fatal is not None:
        print(f"durable host: {host.fatal}", file=sys.stderr)
        return 2
    if host.wake is not None:
        wake.announce(host.wake, args.wake_file)
    return 0


async def next_wake(args: argparse.Namespace) -> int:
    try:
        app_dir = Path(args.app_dir).resolve()
        config_mod.apply_local_settings(app_dir)
        specs = timer_triggers.plan(loader.load_app(app_dir), os.environ, datetime.now(UTC))
        store = open_store(args.store, config_mod.load(app_dir), read_only=True)
        await store.open()
        try:
            info = await wake.describe(store, specs)
        finally:
            await store.close()
    except STARTUP_ERRORS as exc:
        print(f"durable host: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info, sort_keys=True))
    return 0


async def show_keys(args: argparse.Namespace) -> int:
    try:
        app_dir = Path(args.app_dir).resolve()
        config_mod.apply_local_settings(app_dir)
        store = open_store(args.store, config_mod.load(app_dir), read_only=True)
        keys = keys_mod.Keys(store, os.environ)
        await store.open()
        try:
            found = keys_mod.describe(await keys.load(), keys.fixed)
        finally:
            await store.close()
    except STARTUP_ERRORS as exc:
        print(f"durable host: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for line in _key_lines(found):
        print(line)
    return 0


def _key_lines(found: dict[str, object]) -> list[str]:
    def row(key: dict[str, str], label: str) -> str:
        setting = f"   (from {key['setting']})" if key.get("setting") else ""
        return f"  {label:<40} {key['value']}{setting}"

    master = found["master"]
    assert isinstance(master, dict)
    lines = ["master key (valid everywhere, the only key of /admin):", row(master, master["name"])]
    lines.append("host function keys (every function of level function):")
    lines += [row(k, k["name"]) for k in found["host"]]  # type: ignore[attr-defined]
    lines.append("system keys (durabletask_extension: the management API):")
    lines += [row(k, k["name"]) for k in found["system"]]  # type: ignore[attr-defined]
    functions = found["functions"]
    assert isinstance(functions, dict)
    if functions:
        lines.append("function keys:")
        lines += [row(k, f"{f}/{k['name']}") for f, ks in functions.items() for k in ks]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "keys":
        logs.configure("WARNING", "text")
        return asyncio.run(show_keys(args))
    if args.command == "next-wake":
        logs.configure("WARNING", "text")
        return asyncio.run(next_wake(args))
    logs.configure(args.log_level, args.log_format)
    return asyncio.run(serve(args))
