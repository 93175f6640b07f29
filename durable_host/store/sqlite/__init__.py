"""The embedded SQLite store: one task hub in one WAL file, one host at a time.

* ``store``  ``SqliteStore``, the port's methods;
* ``tx``     the connection, the group-commit writer and the record cache;
* ``sql``    the statements;
* ``guard``  the file's identity: a file removed, replaced or taken by a second host.
"""
