"""Command line: ``python -m durable_host start [--app-dir DIR] [--host H] [--port P] [--store S]
[--auth keys|off] [--public-url URL] [--exit-when-idle SECONDS [--wake-file PATH]]``,
``python -m durable_host keys [--app-dir DIR] [--store S] [--json]`` and
``python -m durable_host next-wake [--app-dir DIR] [--store S]`` and
``python -m durable_host replay-check [--app-dir NEW] [--store S] [--instances
running|all|ID...] [--json]`` (``durable_host/engine/replay_check.py``: exit 1 when a stored
instance would fail under the new code), ``python -m durable_host export [--app-dir DIR]
[--store S] --out FILE [--include-keys]`` and ``python -m durable_host import [--app-dir DIR]
[--store S] FILE`` (``durable_host/transfer/``: a stopped host's hub, running work included,
to a file and into an empty hub).

``--exit-when-idle``: stop (exit 0) once nothing has been runnable for that long, printing
one JSON line ``{"event": "idle-exit", "next_wake": ...}`` (and writing it to
``--wake-file``); ``next-wake`` prints the same answer for a stopped host
(``durable_host/triggers/wake.py``, ``docs/schedules.md``).

Prints one line ``durable host listening on http://H:P`` once it serves requests (tests
read the port from it when ``--port 0``), and stops cleanly on SIGTERM or SIGINT:
it stops taking work, gives running activities a grace period, and exits 0. A host whose
store is lost while it runs (``Host.fatal``) stops the same way, prints
``durable host: <reason>`` and exits 2, as a host that cannot start does. Logs go to
stderr, one record per line, each naming its instance (``--log-format text|json``).

``keys`` prints the host's keys (``durable_host/http/keys.py``) - creating them if the hub has
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
from typing import Any, NoReturn

from durable_host.engine import replay_check as replay_check_mod
from durable_host.functions import config as config_mod
from durable_host.functions import loader, local_settings
from durable_host.host import STARTUP_ERRORS, Host, open_store
from durable_host.http import keys as keys_mod
from durable_host.ops import logs
from durable_host.transfer import commands
from durable_host.triggers import timer as timer_triggers
from durable_host.triggers import wake


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line naming the problem (exit 2), not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"durable host: {message} (see {self.prog} --help)\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog=_prog())
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="serve a Durable Functions app")
    start.add_argument("--app-dir", default=".", type=Path)
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument(
        "--port",
        default=None,
        type=int,
        help="default: local.settings.json Host.LocalHttpPort, else 7071",
    )
    start.add_argument(
        "--store",
        default=None,
        help="sqlite (default: <app>/.durable/<hub>.db), sqlite:PATH, azure (AzureWebJobsStorage),"
        " postgres (DURABLE_HOST_POSTGRES) or postgres:URL",
    )
    start.add_argument(
        "--grace", default=10.0, type=float, help="seconds for running activities at shutdown"
    )
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
    _core_tools_flags(start)
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
    check = sub.add_parser(
        "replay-check", help="replay stored histories against new code (writes nothing)"
    )
    check.add_argument("--app-dir", default=".", type=Path, help="the new code")
    check.add_argument("--store", default=None, help="as for start")
    check.add_argument(
        "--instances",
        nargs="+",
        default=["running"],
        metavar="running|all|ID",
        help="default: every instance not yet ended",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    export = sub.add_parser("export", help="write a stopped host's task hub to a file")
    export.add_argument("--app-dir", default=".", type=Path)
    export.add_argument("--store", default=None, help="as for start")
    export.add_argument("--out", required=True, type=Path, help="the hub file to write")
    export.add_argument(
        "--include-keys", action="store_true", help="also the host's keys (the file holds secrets)"
    )
    imp = sub.add_parser("import", help="load a hub file into an empty task hub")
    imp.add_argument("--app-dir", default=".", type=Path)
    imp.add_argument("--store", default=None, help="as for start")
    imp.add_argument("file", type=Path, help="a file written by export")
    args = parser.parse_args(argv)
    words = {"running", "all"} & set(getattr(args, "instances", ()))
    if words and len(args.instances) > 1:
        parser.error("--instances takes running, all, or instance ids, not a mix")
    if getattr(args, "wake_file", None) is not None and args.exit_when_idle is None:
        parser.error("--wake-file needs --exit-when-idle")
    return args


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 10**9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _core_tools_flags(start: argparse.ArgumentParser) -> None:
    """The flags of ``func start`` that mean something here."""
    start.add_argument(
        "--cors",
        default=None,
        help="comma-separated origins allowed to call from a browser (* for any); default: local.settings.json Host.CORS",
    )
    start.add_argument(
        "--cors-credentials",
        action="store_true",
        default=None,
        help="allow credentials in CORS answers",
    )
    start.add_argument(
        "--functions", nargs="+", default=None, metavar="NAME", help="serve only these functions"
    )
    start.add_argument(
        "--verbose", action="store_true", help="debug logging (as --log-level DEBUG)"
    )


def _host_from(args: argparse.Namespace) -> Host:
    """The command line over local.settings.json's Host section, as Core Tools combines them."""
    local = local_settings.read(Path(args.app_dir))
    port = args.port if args.port is not None else (local.port if local.port is not None else 7071)
    origins = local_settings.split_origins(args.cors) if args.cors is not None else local.cors
    credentials = (
        args.cors_credentials if args.cors_credentials is not None else local.cors_credentials
    )
    functions = [n for arg in args.functions for n in arg.split(",")] if args.functions else None
    return Host(
        args.app_dir,
        args.host,
        port,
        args.store,
        args.grace,
        args.auth,
        args.public_url,
        functions=functions,
        cors=origins,
        cors_credentials=credentials,
        exit_when_idle=args.exit_when_idle,
    )


async def serve(args: argparse.Namespace) -> int:
    if args.wake_file is not None and (problem := wake.unwritable(args.wake_file)):
        print(f"durable host: {problem}", file=sys.stderr)
        return 2
    try:
        host = _host_from(args)
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
        try:
            wake.announce(host.wake, args.wake_file)
        except OSError as exc:  # the line is on stdout; a waker reading the file must not wait
            print(f"durable host: could not write --wake-file: {exc}", file=sys.stderr)
            return 2
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


async def replay_check(args: argparse.Namespace) -> int:
    try:
        app_dir = Path(args.app_dir).resolve()
        config_mod.apply_local_settings(app_dir)
        cfg = config_mod.load(app_dir)
        index = loader.load_app(app_dir)
        store = open_store(args.store, cfg, read_only=True)
        await store.open()
        try:
            verdicts = [
                v
                async for v in replay_check_mod.check(
                    store, lambda name: _orchestrator(index, name), cfg.versioning, args.instances
                )
            ]
        finally:
            await store.close()
    except STARTUP_ERRORS as exc:
        print(f"durable host: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(replay_check_mod.report_json(verdicts))
    else:
        for line in replay_check_mod.report_text(verdicts):
            print(line)
    return 1 if replay_check_mod.summary(verdicts)["failed"] else 0


async def transfer(args: argparse.Namespace) -> int:
    try:
        app_dir = Path(args.app_dir).resolve()
        config_mod.apply_local_settings(app_dir)
        cfg = config_mod.load(app_dir)
    except STARTUP_ERRORS as exc:
        print(f"durable host: {exc}", file=sys.stderr)
        return 2
    if args.command == "export":
        return await commands.export_hub(cfg, args.store, args.out, args.include_keys)
    return await commands.import_hub(cfg, args.store, args.file)


def _orchestrator(index: loader.AppIndex, name: str) -> Any:
    info = index.orchestrator(name)
    return info.fn if info is not None and not info.disabled else None


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


def _prog() -> str:
    """``durable-host`` when run as the installed command, else ``python -m durable_host``."""
    name = Path(sys.argv[0]).name
    return name if name.startswith("durable-host") else "python -m durable_host"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "keys":
        logs.configure("WARNING", "text")
        return asyncio.run(show_keys(args))
    if args.command in ("export", "import"):
        logs.configure("WARNING", "text")
        return asyncio.run(transfer(args))
    if args.command == "replay-check":
        logs.configure("WARNING", "text")
        return asyncio.run(replay_check(args))
    if args.command == "next-wake":
        logs.configure("WARNING", "text")
        return asyncio.run(next_wake(args))
    logs.configure("DEBUG" if args.verbose else args.log_level, args.log_format)
    return asyncio.run(serve(args))
