"""Keys, ids and row shapes of the task hub table. Pure: no IO.

One partition per instance; its rows, by RowKey (``docs/azure-storage.md``, Layout):

* ``!``                  ``HEAD_ROW``: the instance record and the record of its last commit,
                         read as a ``Head``;
* ``a``                  ``ATTEMPTS_ROW``: attempts at the instance's next episode;
* ``h<generation>.<n>``  ``history_row_key``: one history event;
* ``i<message id>``      ``inbox_row_key``: one inbox message (``VisibleAt``: not before);
* ``w<work id>``         ``work_row_key``: one activity work item (``DequeueCount``);
* ``o<seq>.<token>.<n>`` ``outbox_index_row_key``: rows a commit staged, to release after it.

Properties shared by many rows: ``W`` the writing process (``writer``), ``N`` a nonce that
tells a retried insert whether its first attempt applied, and the staging mark ``Tok`` /
``Src`` / ``SrcSeq`` (the token, partition and commit sequence of the sending commit; a
marked row is visible only once that commit happened). A text too large for a property is
stored in a blob named by ``<name>Blob`` instead of ``<name>``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

HEAD_ROW = "!"
ATTEMPTS_ROW = "a"
# Row key ranges ``[low, high)`` of one kind of row in a partition.
HISTORY_ROWS = ("h", "i")
INBOX_ROWS = ("i", "j")
OUTBOX_INDEX_ROWS = ("o", "p")
WORK_ROWS = ("w", "x")

INLINE_LIMIT = 30_000  # UTF-8 bytes; a UTF-16 string property holds at most 64 KiB
BATCH_OPS = 100  # entity-group transaction limits: 100 operations, 4 MiB
BATCH_BYTES = 3_000_000
ROW_OVERHEAD = 300  # what a row adds to its JSON size inside a batch request

_KEY_UNSAFE = frozenset("/\\#?%")


def partition_key(instance_id: str) -> str:
    """The instance's PartitionKey: table keys forbid / \\ # ? and control characters,
    so those (and ``%``) are escaped as ``%XX``."""
    return "".join(
        f"%{ord(c):02X}" if c in _KEY_UNSAFE or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c
        for c in instance_id
    )


def instance_id_of(partition: str) -> str:
    """The inverse of ``partition_key``."""
    if "%" not in partition:
        return partition
    out, i = [], 0
    while i < len(partition):
        if partition[i] == "%":
            out.append(chr(int(partition[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(partition[i])
            i += 1
    return "".join(out)


def inbox_row_key(message_id: int) -> str:
    return f"i{message_id:020d}"


def work_row_key(work_id: int) -> str:
    return f"w{work_id:020d}"


def item_id(row_key: str) -> int:
    """The message or work id in an inbox or work row key."""
    return int(row_key[1:])


def history_row_key(generation: str, sequence: int) -> str:
    return f"h{generation}.{sequence:08d}"


def generation_rows(generation: str) -> tuple[str, str]:
    """The row key range of one history generation."""
    return f"h{generation}.", f"h{generation}/"


def outbox_index_row_key(commit_seq: int, token: str, n: int) -> str:
    return f"o{commit_seq:010d}.{token}.{n:04d}"


def outbox_index_commit(row_key: str) -> tuple[int, str]:
    """The commit (sequence, token) an outbox index row belongs to."""
    seq_text, token, _ = row_key[1:].split(".")
    return int(seq_text), token


def new_generation() -> str:
    return uuid.uuid4().hex[:12]


def payload_blob_dir(partition: str) -> str:
    """Where the blobs of one partition's large texts live (a purge deletes the prefix)."""
    return "p/" + hashlib.sha256(partition.encode()).hexdigest()[:24]


class MessageIds:
    """Message and work ids: microseconds * 1000 + a random low part, increasing per process.

    Ids order the inbox (arrival order) and must not collide between processes; a
    collision is detected by the conditional insert and retried with a new id.
    """

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        candidate = time.time_ns() // 1000 * 1000 + random.randrange(1000)
        self._last = max(self._last + 1, candidate)
        return self._last


def written_at(message_id: int) -> float:
    """The wall-clock second an id was allocated."""
    return message_id / 1_000_000_000


class PostCommit(enum.StrEnum):
    """Flags of a head's ``Pending``: work its commit left for afterwards, each idempotent."""

    RELEASE = "R"  # clear the staging mark of the rows its outbox index rows name
    CONSUMED = "C"  # delete the inbox rows listed in ``Consumed``
    OLD_GENERATION = "G"  # delete the history rows of generation ``OldGen``
    FLOOR = "F"  # delete inbox rows below ``Floor`` (an earlier life of the id)


def pending_work(*flags: PostCommit | bool) -> str:
    """A head's ``Pending`` from the flags that apply (``False`` ones are left out)."""
    return "".join(str(flag) for flag in flags if flag)


@dataclass(frozen=True, slots=True)
class Head:
    """The head row as read: the instance record plus the commit record.

    ``row`` is the row itself (instance fields, ``Consumed``, ``OldGen``); the commit
    record's fields are parsed once into the typed fields below.
    """

    row: dict[str, Any]
    etag: str  # the condition of the next commit ("" for a head this process just wrote)
    commit_seq: int  # ``Seq``: commits of this instance so far
    commit_token: str  # ``Tok``: the token of the last commit
    generation: str  # ``Gen``: the visible history rows are of this generation...
    history_count: int  # ``Count``: ...and have a sequence below this
    epoch: int  # ``Epoch`` of the host that wrote it
    inbox_floor: int  # ``Floor``: inbox ids below it belong to an earlier life of the id
    pending: str  # ``Pending``: ``PostCommit`` flags

    @classmethod
    def of(cls, row: dict[str, Any], etag: str) -> Head:
        return cls(
            row=row,
            etag=etag,
            commit_seq=int(row.get("Seq", 0)),
            commit_token=str(row.get("Tok", "")),
            generation=str(row.get("Gen", "")),
            history_count=int(row.get("Count", 0)),
            epoch=int(row.get("Epoch", 0)),
            inbox_floor=int(row.get("Floor", "0")),
            pending=str(row.get("Pending", "")),
        )

    @classmethod
    def from_entity(cls, entity: Any) -> Head:
        """A head row as the table client returned it (its ETag is in its metadata)."""
        return cls.of(dict(entity), entity.metadata["etag"])

    @property
    def old_generation(self) -> str:
        return str(self.row.get("OldGen", ""))


def row_size(row: dict[str, Any]) -> int:
    """An upper estimate of what a row adds to a batch request."""
    return len(json.dumps(row, default=str)) + ROW_OVERHEAD


def chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
