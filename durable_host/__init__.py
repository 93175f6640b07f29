"""A cloud-agnostic host for Azure Durable Functions Python apps.

Runs any ``function_app.py`` written against ``azure-functions`` and
``azure-functions-durable`` - HTTP triggers, orchestrations, activities, timers, events,
sub-orchestrations, entities, the durable client and the management API - with state in
an embedded SQLite file. Start it with ``python -m durable_host start --app-dir DIR``.
"""
