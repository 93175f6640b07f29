"""The Azure Storage extension (5.x) on the host: blob, queue and table bindings; queue and blob triggers.

One module per concern:

* ``spec``         the app's storage bindings read and checked at start-up (pure);
* ``options``      host.json ``extensions.queues`` / ``extensions.blobs`` and the host's settings;
* ``expressions``  binding expressions: ``{name}``, ``{rand-guid}``, ``{DateTime}``, ``%Setting%``,
                   blob path patterns (pure);
* ``accounts``     one async client per connection and service; Azurite for development storage;
* ``binder``       input and output bindings of one invocation (``functions.bindings``' hook);
* ``queue_trigger`` the queue listener: batches, back-off, leases, poison queue;
* ``blob_trigger`` the blob watcher: container scans, receipts, poison queue;
* ``runtime``      the extension on one host: start, stop, backlog for the scale signal.

What runs and what does not yet: ``docs/storage-bindings.md``; each copied behaviour and its
source: ``docs/extension-semantics.md``.

May import every layer below ``triggers``; never the composition (``host``, ``server``, ``cli``),
which wires it in. The Azure SDKs are imported here only, so an app without storage bindings
never loads them (``runtime`` is imported by the host only when the app has such bindings).
"""
