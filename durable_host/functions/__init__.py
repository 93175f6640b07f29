"""The app as the Functions host sees it.

Loading ``function_app.py`` and indexing its functions by trigger (``loader``), host.json and
local settings (``config``, ``local_settings``), invoking a function as the Python worker does
(``invocation``, ``sdk_codec``), the identity behind the durable HTTP call's tokens
(``identity_tokens``) and the start-up report of what runs (``startup_report``).

May import: ``core``, ``ops``, ``cluster``. Must never import: ``store``, ``engine``, ``http``,
``triggers`` or the composition above them.
"""
