"""The hub file: versioned, checksummed JSON lines, written and read as a stream. Pure but
for its file IO.

Line 1 is the header ``{"format": "durable-host-hub", "version": 1, "exported_at": ...,
"source": ..., "keys": bool}``; then one line per record (``{"instance": {...}}`` with the
instance's row, history, inbox and attempt count; ``{"activity": {...}}``; ``{"schedule":
{...}}``; ``{"secret": {...}}``, the host secrets, only when exported with keys); the last
line is the trailer ``{"trailer": {"records": N, "instances": I, "sha256": H}}``, where ``H``
is the SHA-256 of every byte before the trailer line. Only one instance is in memory at a
time, whether writing or reading.

``verify`` reads the whole file once and raises ``HubFileError`` - naming the line - for a
file that is truncated (no trailer, or a trailer that does not count what precedes it),
corrupt (a checksum that does not match, a line that is not a record), of a newer format, or
followed by anything. Import verifies first, then reads again with ``records``, which checks
the same sums as it goes (the file could change between the two reads), so a store's
all-or-nothing write sees an error before its commit.

The file is written as ``FILE.partial`` and renamed when complete, with mode 0600 (it holds
the hub's inputs and outputs, and host secrets when exported with keys): a failed export
leaves no file that looks whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from durable_host.transfer.protocol import (
    ActivityDump,
    InboxItem,
    InstanceDump,
    Item,
    NamedText,
    record_from_json,
    record_to_json,
)

FORMAT = "durable-host-hub"
VERSION = 1


class HubFileError(ValueError):
    """The file cannot be imported: it names why and where."""


@dataclass(frozen=True, slots=True)
class Header:
    version: int
    exported_at: str
    source: str
    keys: bool


@dataclass(frozen=True, slots=True)
class Summary:
    header: Header
    records: int
    instances: int
    sha256: str


def encode_item(item: Item) -> dict[str, Any]:
    if isinstance(item, InstanceDump):
        return {
            "instance": {
                "record": record_to_json(item.record),
                "history": item.history,
                "inbox": [{"message": m.message, "visible_at": m.visible_at} for m in item.inbox],
                "attempts": item.attempts,
            }
        }
    if isinstance(item, ActivityDump):
        return {
            "activity": {
                "instance_id": item.instance_id,
                "execution_id": item.execution_id,
                "task_id": item.task_id,
                "name": item.name,
                "input": item.input_json,
                "dequeue_count": item.dequeue_count,
            }
        }
    return {item.kind: {"name": item.name, "value": item.value}}


def decode_item(line: dict[str, Any]) -> Item:
    """A record line as a record; ``KeyError``/``TypeError``/``ValueError`` if malformed."""
    if not isinstance(line, dict) or len(line) != 1:
        raise ValueError("a record line holds one object with one key")
    ((kind, body),) = line.items()
    if kind == "instance":
        texts = body["history"]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("history events must be JSON texts")
        inbox = [InboxItem(str(m["message"]), m.get("visible_at")) for m in body["inbox"]]
        return InstanceDump(record_from_json(body["record"]), texts, inbox, int(body["attempts"]))
    if kind == "activity":
        return ActivityDump(
            str(body["instance_id"]),
            str(body["execution_id"]),
            int(body["task_id"]),
            str(body["name"]),
            body.get("input"),
            int(body.get("dequeue_count") or 0),
        )
    if kind in ("schedule", "secret"):
        return NamedText(kind, str(body["name"]), str(body["value"]))
    raise ValueError(f"unknown record kind {kind!r}")


class HubFileWriter:
    """Write a hub file: ``add`` each record, then ``finish`` (``abort`` on failure)."""

    def __init__(self, path: Path, source: str, exported_at: str, keys: bool):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an older partial file may have had another mode
        self._file: IO[bytes] = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.records = 0
        self.instances = 0
        header = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": exported_at,
            "source": source,
            "keys": keys,
        }
        self._line(header)

    def _line(self, value: dict[str, Any]) -> None:
        data = json.dumps(value, separators=(",", ":")).encode() + b"\n"
        self._hash.update(data)
        self._file.write(data)

    def add(self, item: Item) -> None:
        self._line(encode_item(item))
        self.records += 1
        self.instances += isinstance(item, InstanceDump)

    def finish(self) -> Summary:
        digest = self._hash.hexdigest()
        trailer = {"records": self.records, "instances": self.instances, "sha256": digest}
        self._file.write(json.dumps({"trailer": trailer}).encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.partial, self.path)
        header = read_header(self.path)
        return Summary(header, self.records, self.instances, digest)

    def abort(self) -> None:
        self._file.close()
        self.partial.unlink(missing_ok=True)


def _header(line: bytes) -> Header:
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise HubFileError("line 1: not a durable host hub file (no hub-file header)")
    version = value.get("version")
    if not isinstance(version, int) or version < 1:
        raise HubFileError(f"line 1: format version {version!r} is not valid")
    if version > VERSION:
        raise HubFileError(
            f"line 1: the file has format version {version}, newer than this host reads"
            f" ({VERSION}): import it with the durable host that exported it, or a newer one"
        )
    return Header(
        version, str(value.get("exported_at")), str(value.get("source")), bool(value.get("keys"))
    )


def read_header(path: Path) -> Header:
    with open(path, "rb") as file:
        return _header(file.readline())


def _scan(path: Path) -> Iterator[tuple[int, Item | Summary]]:
    """Each record with its line number, then the summary once the trailer checked out."""
    digest = hashlib.sha256()
    records = instances = 0
    with open(path, "rb") as file:
        first = file.readline()
        if not first:
            raise HubFileError("the file is empty")
        header = _header(first)
        digest.update(first)
        number = 1
        for line in file:
            number += 1
            if not line.endswith(b"\n"):
                raise HubFileError(f"line {number}: truncated (the file ends inside it)")
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise HubFileError(
                    f"line {number}: not JSON ({exc}): the file is corrupt"
                ) from None
            if isinstance(value, dict) and set(value) == {"trailer"}:
                _check_trailer(value["trailer"], digest.hexdigest(), records, instances, number)
                if file.read(1):
                    raise HubFileError(f"line {number + 1}: data after the trailer")
                yield number, Summary(header, records, instances, digest.hexdigest())
                return
            try:
                item = decode_item(value)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise HubFileError(
                    f"line {number}: not a hub record ({exc!r}): the file is corrupt"
                ) from None
            digest.update(line)
            records += 1
            instances += isinstance(item, InstanceDump)
            yield number, item
    raise HubFileError(f"the file ends after line {number} without its trailer: it is truncated")


def _check_trailer(trailer: Any, digest: str, records: int, instances: int, number: int) -> None:
    if not isinstance(trailer, dict):
        raise HubFileError(f"line {number}: the trailer is malformed")
    if trailer.get("sha256") != digest:
        raise HubFileError(
            f"line {number}: checksum mismatch (the trailer says {trailer.get('sha256')},"
            f" the content hashes to {digest}): the file is corrupt"
        )
    if trailer.get("records") != records or trailer.get("instances") != instances:
        raise HubFileError(
            f"line {number}: the trailer counts {trailer.get('records')} records, the file"
            f" holds {records}: the file is corrupt"
        )


def verify(path: Path) -> Summary:
    """Read the whole file once; its summary, or ``HubFileError``."""
    for _, found in _scan(path):
        if isinstance(found, Summary):
            return found
    raise AssertionError("unreachable: _scan ends with a summary or raises")


def records(path: Path) -> Iterator[Item]:
    """Every record, checked as ``verify`` checks them: ``HubFileError`` comes before the
    iteration ends if anything does not match (a writer must not commit before it ends)."""
    for _, found in _scan(path):
        if not isinstance(found, Summary):
            yield found
