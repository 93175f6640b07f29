"""A cloud-agnostic host for Azure Durable Functions Python apps.

Runs any ``function_app.py`` written against ``azure-functions`` and
``azure-functions-durable`` - HTTP triggers, orchestrations, activities, timers, events,
sub-orchestrations, entities, the durable client and the management API - with state in
an embedded SQLite file, Azure Storage or PostgreSQL. Start it with
``python -m durable_host start --app-dir DIR``.

The packages are layers; each may import only the layers above it in this list, never one
below it (``tests/unit/durable_host/test_layering.py`` checks the directions):

* ``core``      the pure replay core: histories, the SDK shim, orchestration and entity
                episodes, versions, rewind. No IO.
* ``ops``       what every layer may use to run in production: settings, logs, faults,
                telemetry, the Azurite it starts.
* ``cluster``   many hosts on one task hub: partition ownership, membership, the scale signal.
* ``functions`` the app as the Functions host sees it: loading, host.json and local
                settings, the function index, invoking a function.
* ``store``     the storage port and its SQLite, Azure Storage and PostgreSQL implementations.
* ``engine``    the work loops: episodes from read to commit, attempts, activities, the
                durable client operations.
* ``http``      the HTTP front door: listener, limits, CORS, keys and their routes.
* ``triggers``  one module per Functions extension the host runs (HTTP, timer, Durable,
                Storage) and the wake-up contract over all of them.
* ``dashboard``, ``transfer``  the operator's page and moving a hub between stores.

The top-level modules are the composition and the public entry points: ``host`` (one host
object), ``server`` (the routes), ``cli`` (``durable-host``), ``testing`` and
``pytest_plugin``.
"""
