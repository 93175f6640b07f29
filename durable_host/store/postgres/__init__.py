"""The PostgreSQL store (``--store postgres``): the Store port on one schema per task hub.

* ``settings``  the connection setting, pool and timeouts, and the password kept out of text;
* ``schema``    the tables, their version and migrations;
* ``database``  the pool, fenced transactions, retries of lost connections, errors;
* ``partitions`` ownership: a lease row and epoch per partition, heartbeats, the fence;
* ``listen``    LISTEN/NOTIFY, so an idle host hears of new work at once;
* ``sql``       the statements transactions share;
* ``store``     ``PostgresStore``, the port's face.

``docs/postgres.md`` tells operators and DBAs what they need.
"""

from durable_host.store.postgres.settings import PostgresSettings, PostgresSettingsError, from_spec
from durable_host.store.postgres.store import PostgresStore

__all__ = ["PostgresSettings", "PostgresSettingsError", "PostgresStore", "from_spec"]
