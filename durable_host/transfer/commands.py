"""``export`` and ``import``: a task hub, running work included, to a hub file and back.

``export`` needs the hub quiet: it takes the hub as a host does (``HubBusyError`` while a host
serves it; stop the host first) and writes every record (``fileformat``). ``import`` verifies
the whole file first - truncated, corrupt, newer-format files are refused before the target
is even opened - then writes into the target hub all or nothing, and only if it is empty (so
a second import of the same file is refused too). Host secrets travel only with
``--include-keys``; the file is written with mode 0600 either way, and the command says when
it holds secrets.

Each returns the exit status (0 done, 2 refused: the message names why) and prints one JSON
summary line on stdout.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durable_host.functions import config as config_mod
from durable_host.host import StoreSpecError, open_store
from durable_host.store.base import StoreError
from durable_host.transfer import fileformat
from durable_host.transfer.protocol import HubBusyError, HubNotEmptyError
from durable_host.transfer.sqlite import SqliteHub

if TYPE_CHECKING:
    from durable_host.transfer.azure import AzureHub
    from durable_host.transfer.postgres import PostgresHub

    Hub = SqliteHub | AzureHub | PostgresHub

REFUSED = (HubBusyError, HubNotEmptyError, fileformat.HubFileError, OSError, StoreError)
KEYS_WARNING = (
    "durable host: {path} holds the host's keys (secrets): it was written with mode 0600;"
    " keep it as safe as the keys themselves, and delete it once imported"
)


class TransferSpecError(ValueError):
    pass


def open_hub(spec: str | None, cfg: config_mod.HostConfig) -> tuple[str, Hub]:
    """The hub a ``--store`` names, for a transfer, and its kind."""
    if spec is None or spec == "sqlite":
        return "sqlite", SqliteHub(cfg.app_dir / ".durable" / f"{cfg.hub_name}.db")
    if spec.startswith("sqlite:"):
        return "sqlite", SqliteHub(Path(spec.removeprefix("sqlite:")))
    if spec == "azure":
        # The Azure SDK only when asked (as the host imports it).
        from durable_host.store.azure.store import AzureStore
        from durable_host.transfer.azure import AzureHub

        store = open_store(spec, cfg, read_only=True)
        assert isinstance(store, AzureStore)
        return "azure", AzureHub(store)
    if spec == "postgres" or spec.startswith("postgres:"):
        # psycopg only when asked (as the host imports it).
        from durable_host.store.postgres import PostgresStore
        from durable_host.transfer.postgres import PostgresHub

        try:
            store = open_store(spec, cfg, read_only=True)
        except StoreSpecError as exc:  # the connection setting missing or malformed
            raise TransferSpecError(str(exc)) from None
        assert isinstance(store, PostgresStore)
        return "postgres", PostgresHub(store)
    raise TransferSpecError(
        f"export and import do not support the store {spec!r}: use sqlite, sqlite:PATH,"
        " azure, postgres or postgres:URL"
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def export_hub(cfg: config_mod.HostConfig, spec: str | None, out: Path, keys: bool) -> int:
    if out.exists():
        return _refuse(f"{out} exists: export writes a new file only")
    try:
        kind, hub = open_hub(spec, cfg)
        await hub.open_quiet()
    except (*REFUSED, TransferSpecError) as exc:
        return _refuse(str(exc))
    try:
        writer = fileformat.HubFileWriter(out, kind, _now(), keys)
        try:
            async for item in hub.read(include_keys=keys):
                writer.add(item)
            summary = writer.finish()
        except BaseException:
            writer.abort()
            raise
    except REFUSED as exc:  # an unwritable --out, a full disk, the store failing
        return _refuse(f"export failed, no file written: {exc}")
    finally:
        await hub.close()
    if keys:
        print(KEYS_WARNING.format(path=out), file=sys.stderr)
    _print("exported", out, summary)
    return 0


async def import_hub(cfg: config_mod.HostConfig, spec: str | None, path: Path) -> int:
    try:
        summary = fileformat.verify(path)
    except (fileformat.HubFileError, OSError) as exc:
        return _refuse(f"cannot import {path}: {exc}")
    try:
        _, hub = open_hub(spec, cfg)
        await hub.open_quiet()
    except (*REFUSED, TransferSpecError) as exc:
        return _refuse(str(exc))
    try:
        await hub.check_empty()
        await hub.write(fileformat.records(path))
    except REFUSED as exc:
        return _refuse(f"cannot import {path}: {exc}; nothing was written")
    finally:
        await hub.close()
    if summary.header.keys:
        print(f"durable host: imported the host's keys from {path}", file=sys.stderr)
    _print("imported", path, summary)
    return 0


def _refuse(message: str) -> int:
    print(f"durable host: {message}", file=sys.stderr)
    return 2


def _print(verb: str, path: Path, summary: fileformat.Summary) -> None:
    line: dict[str, Any] = {
        "event": verb,
        "file": str(path),
        "records": summary.records,
        "instances": summary.instances,
        "sha256": summary.sha256,
        "keys": summary.header.keys,
    }
    print(json.dumps(line), flush=True)
