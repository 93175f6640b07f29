"""Operations: what any layer needs to run in production.

The one reader of numeric settings and ``ConfigError`` (``settings``), structured logs
(``logs``), fault injection for durability tests (``faults``), telemetry and its set-up
(``telemetry``, ``telemetry_setup``), the Azurite the host starts for
``UseDevelopmentStorage=true`` (``azurite``).

May import: ``core``. Must never import: any other package of the host (the stores and the
cluster import ``ops``, so ``ops`` reaching them would be a circle).
"""
