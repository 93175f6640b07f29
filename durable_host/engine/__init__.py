"""The engine: the work of a host, from a ready instance to its committed episode.

``loops`` (``Engine``: the workers, timer and poll loops, start and stop), ``episodes`` (one
episode or entity batch, from read to commit), ``attempts`` (poison counts, the start
hand-over, the version check), ``ready`` (the ready set), ``activity_runner`` and
``activities`` (activity work items, run bounded and completed once), ``client`` (the durable
client operations the HTTP fronts call), ``replay_check`` (stored histories against new
code), ``settings``.

May import: ``core``, ``ops``, ``cluster``, ``functions``, ``store`` (its port; the implementations
only through the factory). Must never import: ``http``, ``triggers`` or the composition.
"""
