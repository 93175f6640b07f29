"""Many hosts on one task hub: who owns which partition, who is alive, how many hosts it wants.

``ownership`` is the pure core (partitions, epochs, fair shares, handovers between versions,
silence); ``membership`` runs its rounds against a store's backend; ``scale`` is the pure
scale signal (``GET /admin/host/scale``).

May import: ``core``, ``ops``. Must never import: ``functions``, ``store``, ``engine``, ``http``,
``triggers`` or anything above them (the stores run the membership rounds).
"""
