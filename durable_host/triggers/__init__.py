"""One module per Functions extension the host runs: its triggers, bindings and routes.

* ``http``     HTTP triggers: routes to functions, ``func.HttpRequest`` in and the response out;
* ``timer``    timer triggers (NCRONTAB schedules in ``ncrontab``), with the monitor;
* ``durable``  the Durable extension's management webhooks and the SDK's RPC;
* ``storage``  the Storage extension: blob, queue and table bindings, queue and blob triggers
               (a subpackage, one module per concern);
* ``wake``     when a host that exits when idle must run again, over every trigger.

A new extension (MCP) is a new module or subpackage here.

May import: every layer below (``core`` to ``http``). Must never import: ``dashboard``,
``transfer`` or the composition (``host``, ``server``, ``cli``).
"""
