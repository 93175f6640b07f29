"""The storage port (``base``) and its three implementations, built by one ``factory``.

``sqlite`` is the embedded default (one host per file), ``azure`` the Azure Storage task hub,
``postgres`` the PostgreSQL one (both shared by many hosts); ``codec`` the encodings they
share. ``factory.open_store(spec, cfg)`` builds any of them from a ``--store`` spec and imports
an SDK only when its store is chosen.

May import: ``core`` (records, history, versioning), ``ops``, ``cluster``, and ``functions.config``
(the factory reads the host's settings). Must never import: ``engine``, ``http``, ``triggers``
or the composition: a store knows nothing of the work it keeps.
"""
