"""The Storage extension's bindings of an app, read and checked once at start-up. Pure.

``plan(index, env)`` reads every ``blob``, ``queue`` and ``table`` binding and every
``queueTrigger`` and ``blobTrigger`` (as the decorators and ``generic_*_binding(type=...)`` write
them) into ``Binding`` records, resolving ``%Setting%`` references, and refuses what the
Functions host would not run with one ``StorageConfigError`` line naming the function, the
binding and the property or setting:

* a property the binding does not take (``blob``: path, connection, dataType; ``queue``:
  queueName; ``table``: tableName, partitionKey, rowKey, take, filter; ``blobTrigger`` also
  ``source``), a missing ``path`` / ``queueName`` / ``tableName``, a ``take`` that is not a
  positive whole number, a ``dataType`` other than string or binary;
* a queue or table name that Azure Storage would refuse (checked when it holds no ``{...}``);
  a blob path without a container, a blob-trigger container with an expression in it;
* an unset ``%Setting%``; a ``connection`` whose settings are missing or malformed
  (``functions_connections.read_connection``; ``AzureWebJobsStorage`` when none is named), or
  an identity-based one without an endpoint for the service the binding uses;
* a storage binding on an orchestrator or entity function (the Durable extension allows only
  the orchestration or entity trigger there); an output parameter not annotated
  ``func.Out[...]`` (the Python worker's rule), or an input annotated so.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import azure.functions as func

from durable_host.functions.loader import AppIndex, AppLoadError, FunctionInfo
from durable_host.triggers.storage import expressions
from functions_connections import (
    ConnectionSettingError,
    StorageConnection,
    blob_service,
    queue_service,
    read_connection,
    table_service,
)

STORAGE_TYPES = ("blob", "queue", "table", "queueTrigger", "blobTrigger")
DEFAULT_CONNECTION = "AzureWebJobsStorage"
_COMMON = {"type", "direction", "name", "connection", "datatype"}
_KNOWN = {
    "blob": _COMMON | {"path"},
    "blobTrigger": _COMMON | {"path", "source"},
    "queue": _COMMON | {"queuename"},
    "queueTrigger": _COMMON | {"queuename"},
    "table": _COMMON | {"tablename", "partitionkey", "rowkey", "take", "filter"},
}
_SERVICE = {"blob": "blob", "blobTrigger": "blob", "queue": "queue", "queueTrigger": "queue"}
_QUEUE_NAME = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,62}$")
_CONTAINER = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$|^\$root$")


class StorageConfigError(AppLoadError):
    """An app's storage binding the host cannot run as written (one line, names it)."""


@dataclass(frozen=True, slots=True)
class Binding:
    function: str
    name: str  # the parameter (``$return`` for the return value)
    type: str  # blob | queue | table | queueTrigger | blobTrigger
    direction: str  # in | out
    connection: StorageConnection
    path: str = ""  # blob: container/blob, settings resolved, ``{...}`` left for run time
    queue: str = ""
    table: str = ""
    partition_key: str | None = None
    row_key: str | None = None
    take: int | None = None
    filter: str | None = None
    data_type: str | None = None  # string | binary
    annotation: Any = None  # the parameter's type (the ``T`` of ``func.Out[T]`` for outputs)

    @property
    def describe(self) -> str:
        return f"function '{self.function}': {self.type} binding '{self.name}'"

    @property
    def container(self) -> str:
        return self.path.split("/", 1)[0]

    @property
    def blob_pattern(self) -> str:
        return self.path.split("/", 1)[1] if "/" in self.path else ""


def is_storage(binding: Mapping[str, Any]) -> bool:
    return str(binding.get("type", "")) in STORAGE_TYPES


def has_storage(info: FunctionInfo) -> bool:
    return any(is_storage(b) for b in info.bindings)


def plan(
    functions: list[FunctionInfo],
    env: Mapping[str, str],
    durable: AppIndex | None = None,
) -> dict[str, list[Binding]]:
    """Each served function's storage bindings, checked (see the module docstring)."""
    if durable is not None:
        for kind, infos in (
            ("orchestrator", durable.orchestrators.values()),
            ("entity", durable.entities.values()),
        ):
            for info in infos:
                found = next((b for b in info.bindings if is_storage(b)), None)
                if found is not None:
                    raise StorageConfigError(
                        f"function '{info.name}' is an {kind} function and may not carry the"
                        f" {found.get('type')} binding '{found.get('name')}': the Durable"
                        f" extension allows only the {kind} trigger there (move the I/O into"
                        " an activity)"
                    )
    planned: dict[str, list[Binding]] = {}
    for info in functions:
        hints = _hints(info.fn)
        checked = [_binding(info, raw, env, hints) for raw in info.bindings if is_storage(raw)]
        if checked:
            planned[info.name] = checked
    return planned


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: fall back to the raw ones
        return {
            name: p.annotation
            for name, p in inspect.signature(fn).parameters.items()
            if p.annotation is not inspect.Parameter.empty
        }


def _binding(
    info: FunctionInfo, raw: Mapping[str, Any], env: Mapping[str, str], hints: dict[str, Any]
) -> Binding:
    kind = str(raw["type"])
    name = str(raw.get("name") or "?")
    where = f"function '{info.name}': {kind} binding '{name}'"
    unknown = sorted(k for k in raw if k.lower() not in _KNOWN[kind])
    if unknown:
        takes = ", ".join(sorted(_KNOWN[kind] - {"type", "direction", "name"}))
        raise StorageConfigError(f"{where}: unknown property '{unknown[0]}' (it takes {takes})")
    direction = str(raw.get("direction", "IN")).lower()
    if kind.endswith("Trigger") and direction != "in":
        raise StorageConfigError(f"{where}: a trigger's direction is in, not {direction}")

    def text(key: str, required: bool = True) -> str | None:
        value = next((v for k, v in raw.items() if k.lower() == key.lower()), None)
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                raise StorageConfigError(f"{where}: the property {key} is missing")
            return None
        try:
            return expressions.resolve_settings(str(value), env)
        except KeyError as exc:
            raise StorageConfigError(
                f"{where}: {key} refers to the app setting %{exc.args[0]}%, which is not set"
            ) from None

    # ``connection`` names a setting (or, as in Functions, a prefix of ``__`` settings).
    connection_name = str(raw.get("connection") or DEFAULT_CONNECTION)
    try:
        connection = read_connection(connection_name, env)
        if connection.identity_based:
            connection.uri(_SERVICE.get(kind, "table"))  # type: ignore[arg-type]
        else:
            _check_string(connection, _SERVICE.get(kind, "table"))
    except ConnectionSettingError as exc:
        raise StorageConfigError(f"{where}: connection '{connection_name}': {exc}") from None
    data_type = (text("dataType", required=False) or "").lower() or None
    if data_type not in (None, "string", "binary"):
        raise StorageConfigError(f"{where}: dataType {data_type!r} is not string or binary")
    fields: dict[str, Any] = {}
    if kind in ("blob", "blobTrigger"):
        path = str(text("path"))
        container, _, blob = path.partition("/")
        if kind == "blob" and not blob:
            raise StorageConfigError(f"{where}: path {path!r} names no blob (container/blob)")
        if "{" not in container and not _CONTAINER.match(container):
            raise StorageConfigError(f"{where}: {container!r} is not a blob container name")
        if kind == "blobTrigger":
            if "{" in container:
                raise StorageConfigError(f"{where}: the container of a trigger path is literal")
            try:
                expressions.pattern(blob or "{name}")
            except ValueError as exc:
                raise StorageConfigError(f"{where}: path {path!r}: {exc}") from None
        fields["path"] = path
    elif kind in ("queue", "queueTrigger"):
        queue = str(text("queueName"))
        if kind == "queueTrigger" and "{" in queue:
            raise StorageConfigError(f"{where}: a trigger's queueName is literal, not {queue!r}")
        if "{" not in queue and not _QUEUE_NAME.match(queue):
            raise StorageConfigError(
                f"{where}: queueName {queue!r} is not a queue name (3-63 lowercase letters,"
                " digits and single hyphens)"
            )
        fields["queue"] = queue
    else:
        table = str(text("tableName"))
        if "{" not in table and not _TABLE_NAME.match(table):
            raise StorageConfigError(f"{where}: tableName {table!r} is not a table name")
        fields.update(
            table=table,
            partition_key=text("partitionKey", required=False),
            row_key=text("rowKey", required=False),
            filter=text("filter", required=False),
        )
        take = next((v for k, v in raw.items() if k.lower() == "take"), None)
        if take is not None:
            if isinstance(take, bool) or not str(take).strip().isdigit() or int(take) < 1:
                raise StorageConfigError(f"{where}: take {take!r} is not a positive whole number")
            fields["take"] = int(take)
        if direction == "in" and fields["row_key"] and not fields["partition_key"]:
            raise StorageConfigError(f"{where}: a rowKey needs a partitionKey")
    annotation = _annotation(where, name, direction, hints)
    return Binding(
        info.name,
        name,
        kind,
        direction,
        connection,
        data_type=data_type,
        annotation=annotation,
        **fields,
    )


def _check_string(connection: StorageConnection, service: str) -> None:
    """A connection string the SDK refuses, found now (building a client does no IO)."""
    text = connection.connection_string or ""
    if "usedevelopmentstorage=true" in text.replace(" ", "").lower():
        return
    builders = {"blob": blob_service, "queue": queue_service, "table": table_service}
    builders[service](connection).close()


def _annotation(where: str, name: str, direction: str, hints: dict[str, Any]) -> Any:
    if name == "$return":
        return hints.get("return")
    hint = hints.get(name)
    is_out = typing.get_origin(hint) is func.Out or hint is func.Out
    if direction == "out" and hint is not None and not is_out:
        raise StorageConfigError(
            f"{where}: an output binding's parameter must be annotated func.Out[...]"
        )
    if direction == "in" and is_out:
        raise StorageConfigError(f"{where}: an input binding's parameter is not a func.Out")
    if is_out:
        args = typing.get_args(hint)
        return _required(args[0]) if args else None
    return _required(hint)


def _required(hint: Any) -> Any:
    """``T`` of ``T | None`` (a missing blob or entity is None whatever the type asks)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint
