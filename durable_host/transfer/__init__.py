"""Moving a task hub, running work included, between stores: ``export`` and ``import``.

* ``fileformat`` - the hub file: versioned, checksummed JSON lines, written and read as a
  stream (one instance at a time in memory);
* ``protocol`` - what a store offers a transfer (``HubSource``, ``HubTarget``) and the
  store-neutral records that travel (``InstanceDump``, ``ActivityDump``, ``NamedText``);
* ``sqlite``, ``azure``, ``postgres`` - that protocol on each store (one store, one module);
* ``commands`` - the two commands: quiet hub, verification before any write, summaries.

May import ``core``, ``ops``, ``cluster``, ``functions`` and ``store``; must never import the
engine, HTTP, the triggers, the dashboard or the composition (``host``, ``server``, ``cli``).
"""
