"""The session: its document and every operation on it as a pure reducer.

``state``, ``entries``, ``pages``, ``changes`` (the document and its history); ``documents``,
``requests`` (typed documents and the request shapes: the trust boundary); ``submissions``,
``tasks``, ``task_types`` (the turn queue and the task graph); ``commit`` and ``reducer`` (one
atomic change, every entity operation); ``previews``, ``retention``.

May import: ``common``, ``workspace``. Must never import: ``turn``, ``skills``, ``loops``.
"""
