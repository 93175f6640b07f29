"""Command line: `python -m services.mailbox serve --db PATH [--host H] [--port P]`.

Once the socket is bound it prints exactly one line to stdout, `mailbox listening on
http://HOST:PORT`, so a parent that asked for port 0 can read the real port. It exits with
status 0 on SIGTERM or SIGINT, and with status 2 (and a message on stderr) when the database or
the port cannot be opened.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
import sys
from pathlib import Path

from aiohttp import web

from services.mailbox.server import create_app
from services.mailbox.store import MailStore

# In-flight answers get this long to finish on shutdown; commits are already durable, so
# cutting a delayed answer short loses nothing.
SHUTDOWN_GRACE_SECONDS = 1.0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(serve(args.db, args.host, args.port))
    except (OSError, sqlite3.Error) as exc:
        print(f"mailbox: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m services.mailbox")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the mail service")
    serve_cmd.add_argument("--db", required=True, type=Path, help="SQLite file (created if absent)")
    serve_cmd.add_argument("--host", default="127.0.0.1")
    serve_cmd.add_argument("--port", default=8025, type=int, help="0 picks a free port")
    return parser


async def serve(db: Path, host: str, port: int) -> None:
    store = MailStore(db)
    runner = web.AppRunner(
        create_app(store), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SECONDS
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        bound_port = runner.addresses[0][1]
        url_host = f"[{host}]" if ":" in host else host
        print(f"mailbox listening on http://{url_host}:{bound_port}", flush=True)
        await _until_signalled()
    finally:
        await runner.cleanup()
        store.close()


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


if __name__ == "__main__":
    sys.exit(main())
