"""Blob, queue and table input and output bindings of one invocation (``functions.bindings``). IO.

Inputs are read before the function runs, with the invocation's binding data resolving
``{...}`` (``expressions``):

* **blob input** - the blob's bytes as the parameter's annotation asks, as the Python worker
  converts them: ``str`` (UTF-8 text), ``bytes``, else a ``func.InputStream`` (its ``name``,
  ``uri`` and ``length`` come from a blob trigger's metadata, as the worker builds it; on
  other triggers they are None). Without an annotation ``dataType`` decides (string: ``str``,
  binary: ``bytes``). A blob that does not exist arrives as ``None``.
* **table input** - with ``partitionKey`` and ``rowKey``: that entity as JSON text, ``None``
  when there is none; otherwise a JSON array of the entities matching ``partitionKey`` and
  ``filter`` (an OData filter), at most ``take`` of them. Each entity is an object of its
  properties plus ``PartitionKey``, ``RowKey`` and ``Timestamp``.

Outputs are ``func.Out`` objects (or ``$return``) written only once the function returned,
in the order the app declares them; a function that raised writes nothing. A write that
fails fails the invocation (an HTTP 500, a failed activity, a queue message tried again):

* **blob output** - ``str`` (UTF-8), ``bytes`` or a readable object, replacing the blob; the
  container is created when missing. A blob written to a container this host's blob
  trigger watches wakes that watcher at once (the extension's blob-written watcher), so a
  chain of blob functions does not wait for the next scan.
* **queue output** - one message or a list (``str``, ``bytes``, ``func.QueueMessage``), each
  encoded as ``extensions.queues.messageEncoding`` says; the queue is created when missing. A
  message for a queue this host's queue trigger listens to wakes that listener at once (as
  the extension's shared queue watcher does), so a chain of queue functions does not wait
  for the next poll.
* **table output** - an entity or a list of entities (JSON text, a dict or a list), each with
  the binding's ``partitionKey`` / ``rowKey`` where it has none, written as the extension's
  ``TableEntityWriter`` does: one transaction per partition (at most 100 entities, a row key
  once per transaction); an entity without an ``odata.etag`` is inserted (one that exists
  fails the write), ``"odata.etag": "*"`` replaces it whatever it holds, another ETag replaces
  it only if unchanged; the table is created when missing. Table input entities carry their
  ``odata.etag``, so reading, changing and writing one back is a conditional replace.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import azure.functions as func
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.functions.blob import InputStream

from durable_host.functions.loader import FunctionInfo
from durable_host.triggers.storage import expressions
from durable_host.triggers.storage.accounts import Accounts
from durable_host.triggers.storage.spec import Binding

log = logging.getLogger("durable_host.storage")


class _Out(func.Out[Any]):
    def __init__(self) -> None:
        self.value: Any = None

    def set(self, val: Any) -> None:
        self.value = val

    def get(self) -> Any:
        return self.value


@dataclass
class _Prepared:
    binder: StorageBinder
    outputs: list[tuple[Binding, _Out | None]]
    metadata: Mapping[str, Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    async def succeeded(self, result: Any) -> Any:
        for binding, out in self.outputs:
            value = result if out is None else out.get()
            if value is not None:
                await self.binder.write(binding, value, self.metadata)
        return result


def encode_message(body: str | bytes, encoding: str) -> str:
    raw = body.encode() if isinstance(body, str) else bytes(body)
    if encoding == "base64":
        return base64.b64encode(raw).decode("ascii")
    return raw.decode("utf-8")


def decode_message(text: str, encoding: str) -> str | bytes:
    """A received message's body: text when it is UTF-8, else bytes."""
    raw = base64.b64decode(text, validate=True) if encoding == "base64" else text.encode()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def entity_json(entity: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entity.items():
        out[key] = _plain(value)
    found = getattr(entity, "metadata", {})
    if found.get("timestamp") is not None:
        out["Timestamp"] = _plain(found["timestamp"])
    if found.get("etag"):
        out["odata.etag"] = found["etag"]  # the extension's JSON carries every entity key
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    inner = getattr(value, "value", None)
    if inner is not None and type(value).__name__ == "EntityProperty":
        return inner
    return value


class StorageBinder:
    def __init__(
        self,
        plan: Mapping[str, list[Binding]],
        accounts: Accounts,
        message_encoding: str,
        notify: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.accounts = accounts
        self.encoding = message_encoding
        # (kind, connection, queue or container): a message or blob was just written there
        self.notify = notify

    def handles(self, info: FunctionInfo) -> bool:
        return any(not b.type.endswith("Trigger") for b in self.plan.get(info.name, ()))

    async def prepare(self, info: FunctionInfo, metadata: Mapping[str, Any]) -> _Prepared:
        prepared = _Prepared(self, [], metadata)
        for binding in self.plan.get(info.name, ()):
            if binding.type.endswith("Trigger"):
                continue
            if binding.direction == "out":
                out = None if binding.name == "$return" else _Out()
                prepared.outputs.append((binding, out))
                if out is not None:
                    prepared.kwargs[binding.name] = out
            elif binding.type == "blob":
                prepared.kwargs[binding.name] = await self.read_blob(binding, metadata)
            else:
                prepared.kwargs[binding.name] = await self.read_table(binding, metadata)
        return prepared

    # --- inputs -------------------------------------------------------------------------

    async def read_blob(self, binding: Binding, metadata: Mapping[str, Any]) -> Any:
        path = expressions.resolve(binding.path, metadata)
        container, _, name = path.partition("/")
        client = self.accounts.blobs(binding.connection.name).get_blob_client(container, name)
        try:
            downloader = await client.download_blob()
            data: bytes = await downloader.readall()
        except ResourceNotFoundError:
            return None  # a missing input blob is None, as on the Functions host
        return blob_value(binding, data, metadata)

    async def read_table(self, binding: Binding, metadata: Mapping[str, Any]) -> str | None:
        table = self.accounts.tables(binding.connection.name).get_table_client(
            expressions.resolve(binding.table, metadata)
        )
        pk = expressions.resolve(binding.partition_key, metadata) if binding.partition_key else None
        rk = expressions.resolve(binding.row_key, metadata) if binding.row_key else None
        if pk is not None and rk is not None:
            try:
                return json.dumps(entity_json(await table.get_entity(pk, rk)))
            except ResourceNotFoundError:
                return None
        clauses = []
        if pk is not None:
            clauses.append("PartitionKey eq '" + pk.replace("'", "''") + "'")
        if binding.filter:
            clauses.append(f"({expressions.resolve(binding.filter, metadata)})")
        rows: list[dict[str, Any]] = []
        try:
            if clauses:
                pages = table.query_entities(" and ".join(clauses), results_per_page=binding.take)
            else:
                pages = table.list_entities(results_per_page=binding.take)
            async for entity in pages:
                rows.append(entity_json(entity))
                if binding.take is not None and len(rows) >= binding.take:
                    break
        except ResourceNotFoundError:
            pass  # no table yet: no entities
        return json.dumps(rows)

    # --- outputs ------------------------------------------------------------------------

    async def write(self, binding: Binding, value: Any, metadata: Mapping[str, Any]) -> None:
        if binding.type == "blob":
            await self.write_blob(binding, value, metadata)
        elif binding.type == "queue":
            await self.write_queue(binding, value, metadata)
        else:
            await self.write_table(binding, value, metadata)

    async def write_blob(self, binding: Binding, value: Any, metadata: Mapping[str, Any]) -> None:
        if callable(getattr(value, "read", None)):
            value = value.read()
        if isinstance(value, str):
            data = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray)):
            data = bytes(value)
        else:
            raise TypeError(
                f"blob output '{binding.name}' takes str, bytes or a readable object, not"
                f" {type(value).__name__}"
            )
        path = expressions.resolve(binding.path, metadata)
        container, _, name = path.partition("/")
        service = self.accounts.blobs(binding.connection.name)
        try:
            await service.get_blob_client(container, name).upload_blob(data, overwrite=True)
        except ResourceNotFoundError:
            await _create(service.create_container(container))
            await service.get_blob_client(container, name).upload_blob(data, overwrite=True)
        if self.notify is not None:
            self.notify("blob", binding.connection.name, container)

    async def write_queue(self, binding: Binding, value: Any, metadata: Mapping[str, Any]) -> None:
        items = value if isinstance(value, (list, tuple)) else [value]
        bodies: list[str | bytes] = []
        for item in items:
            if isinstance(item, func.QueueMessage):
                bodies.append(item.get_body())
            elif isinstance(item, (str, bytes, bytearray)):
                bodies.append(item if isinstance(item, str) else bytes(item))
            else:
                bodies.append(json.dumps(item))  # a dict or number, as the worker's JSON
        name = expressions.resolve(binding.queue, metadata).lower()
        queue = self.accounts.queues(binding.connection.name).get_queue_client(name)
        for index, body in enumerate(bodies):
            text = encode_message(body, self.encoding)
            try:
                await queue.send_message(text)
            except ResourceNotFoundError:
                if index:
                    raise
                await _create(queue.create_queue())
                await queue.send_message(text)
        if self.notify is not None and bodies:
            self.notify("queue", binding.connection.name, name)

    async def write_table(self, binding: Binding, value: Any, metadata: Mapping[str, Any]) -> None:
        if isinstance(value, (str, bytes)):
            value = json.loads(value)
        entities = value if isinstance(value, list) else [value]
        table_name = expressions.resolve(binding.table, metadata)
        service = self.accounts.tables(binding.connection.name)
        table = service.get_table_client(table_name)
        batches: list[list[tuple[Any, ...]]] = []
        open_batch: dict[str, tuple[list[tuple[Any, ...]], set[str]]] = {}
        for entity in entities:
            if not isinstance(entity, dict):
                raise TypeError(f"table output '{binding.name}' takes JSON objects")
            row = dict(entity)
            # The entity's own keys (any case) win over the binding's.
            for key in ("PartitionKey", "RowKey"):
                given = next((k for k in row if k.lower() == key.lower()), None)
                if given is not None:
                    row[key] = row.pop(given)
            if "PartitionKey" not in row and binding.partition_key:
                row["PartitionKey"] = expressions.resolve(binding.partition_key, metadata)
            if "RowKey" not in row and binding.row_key:
                row["RowKey"] = expressions.resolve(binding.row_key, metadata)
            if not row.get("PartitionKey") or "RowKey" not in row:
                raise ValueError(
                    f"table output '{binding.name}': an entity needs PartitionKey and RowKey"
                )
            row.pop("Timestamp", None)
            pk, rk = str(row["PartitionKey"]), str(row["RowKey"])
            found = open_batch.get(pk)
            # One transaction per partition, at most 100 rows, each row key once in it.
            if found is None or rk in found[1] or len(found[0]) >= TABLE_BATCH:
                found = ([], set())
                open_batch[pk] = found
                batches.append(found[0])
            found[0].append(_table_action(row))
            found[1].add(rk)
        for batch in batches:
            try:
                await table.submit_transaction(batch)
            except HttpResponseError as exc:  # a transaction's errors are not typed by status
                if exc.status_code != 404 or "TableNotFound" not in str(exc):
                    raise
                await _create(service.create_table(table_name))
                await table.submit_transaction(batch)


TABLE_BATCH = 100  # entities in one entity-group transaction (the service's limit)


def _table_action(row: dict[str, Any]) -> tuple[Any, ...]:
    """How the extension writes an entity (its ETag is the ``odata.etag`` key, as in a
    ``TableEntity``): none - insert (a row that exists fails the write); ``*`` - upsert
    replacing the row; another - replace if unchanged."""
    from azure.core import MatchConditions
    from azure.data.tables import UpdateMode

    etag = row.pop("odata.etag", None)
    if not etag:
        return ("create", row)
    if etag == "*":
        return ("upsert", row, {"mode": UpdateMode.REPLACE})
    return (
        "update",
        row,
        {
            "mode": UpdateMode.REPLACE,
            "etag": etag,
            "match_condition": MatchConditions.IfNotModified,
        },
    )


async def _create(coro: Any) -> None:
    """Create a container, queue or table that another host may be creating too."""
    try:
        await coro
    except ResourceExistsError:
        pass


def blob_value(binding: Binding, data: bytes, metadata: Mapping[str, Any]) -> Any:
    """A blob's bytes as the parameter asks (see the module docstring)."""
    wanted = binding.annotation
    if wanted is str or (wanted is None and binding.data_type == "string"):
        return data.decode("utf-8")
    if wanted is bytes or (wanted is None and binding.data_type == "binary"):
        return data
    props = metadata.get("Properties") if isinstance(metadata.get("Properties"), dict) else None
    return InputStream(
        data=data,
        name=metadata.get("BlobTrigger") if isinstance(metadata.get("BlobTrigger"), str) else None,
        uri=metadata.get("Uri") if isinstance(metadata.get("Uri"), str) else None,
        length=int(props["Length"]) if props and props.get("Length") is not None else None,
        blob_properties=props,
        metadata=metadata.get("Metadata") if isinstance(metadata.get("Metadata"), dict) else None,
    )
