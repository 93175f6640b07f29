"""Command line: ``python -m durable_host start [--app-dir DIR] [--host H] [--port P] [--store S]``.

Prints one line ``durable host listening on http://H:P`` once it serves requests (tests
read the port from it when ``--port 0``), and stops cleanly on SIGTERM or SIGINT:
it stops taking work, gives running activities a grace period, and exits 0. A host whose
store is lost while it runs (``Host.fatal``) stops the same way, prints
``durable host: <reason>`` and exits 2, as a host that cannot start does. Logs go to
stderr, one record per line, each naming its instance (``--log-format text|json``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from durable_host import logs
from durable_host.host import STARTUP_ERRORS, Host


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
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    host = Host(args.app_dir, args.host, args.port, args.store, args.grace)
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
        await stop.wait()
    await host.stop()
    if host.fatal is not None:
        print(f"durable host: {host.fatal}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logs.configure(args.log_level, args.log_format)
    return asyncio.run(serve(args))
