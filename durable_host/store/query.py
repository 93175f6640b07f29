"""The instance queries both SQL stores build, written once with the dialect as a parameter.

``instance_filters(query, dialect)`` is the ``WHERE`` clause and its arguments for a
``records.Query`` over the ``instances`` table: entities or orchestrations, creation and
update windows, the continuation token, runtime statuses and an id prefix (also given as a
key range, so the primary key's index finds the rows). The two dialects differ only in how
they spell a parameter, a literal ``%``, a list of values and a leading substring. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durable_host.core.records import Query
from durable_host.store import codec


@dataclass(frozen=True, slots=True)
class Dialect:
    param: str  # a parameter's placeholder
    true: str  # a condition that always holds (the clause is never empty)
    percent: str  # a literal % inside a statement that has parameters
    leading: str  # ``leading.format(p)``: instance_id's first p-th parameter characters
    sqlite: bool  # a list of values as ``IN (?, ?)`` (SQLite) or ``= ANY(%s)`` (PostgreSQL)

    def any_of(self, column: str, values: list[str]) -> tuple[str, list[Any]]:
        if self.sqlite:
            return f"{column} IN ({', '.join(self.param for _ in values)})", list(values)
        return f"{column} = ANY({self.param})", [list(values)]


SQLITE = Dialect(
    param="?", true="1=1", percent="%", leading="substr(instance_id, 1, {})", sqlite=True
)
POSTGRES = Dialect(
    param="%s", true="TRUE", percent="%%", leading="left(instance_id, {})", sqlite=False
)


def instance_filters(query: Query, dialect: Dialect) -> tuple[str, list[Any]]:
    p = dialect.param
    where, args = [dialect.true], list[Any]()
    if query.entities is True:
        where.append(f"instance_id LIKE '@{dialect.percent}'")
    elif query.entities is False:
        where.append(f"instance_id NOT LIKE '@{dialect.percent}'")
    for column, op, value in (
        ("created_at", ">=", query.created_from),
        ("created_at", "<=", query.created_to),
        ("updated_at", ">=", query.updated_from),
        ("updated_at", "<=", query.updated_to),
        ("instance_id", ">", query.continuation),
    ):
        if value is not None:
            where.append(f"{column} {op} {p}")
            args.append(value)
    if query.statuses:
        clause, values = dialect.any_of("status", list(query.statuses))
        where.append(clause)
        args.extend(values)
    if query.prefix:
        where.append(f"{dialect.leading.format(p)} = {p}")
        args.extend([len(query.prefix), query.prefix])
        # The same rows as a key range, so the primary key's index finds them.
        where.append(f"instance_id >= {p}")
        args.append(query.prefix)
        if (bound := codec.prefix_bound(query.prefix)) is not None:
            where.append(f"instance_id < {p}")
            args.append(bound)
    return " AND ".join(where), args
