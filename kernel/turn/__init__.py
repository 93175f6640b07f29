"""The agent turn's pure parts: model shapes (``model_io``), the offline planner (``planner``,
``calculator``), the tool catalogue (``tools``), the turn's policies (``policy``), failure
handling (``failures``) and approval tokens (``approval_tokens``).

May import: ``common``, ``workspace``, ``session``. Must never import: ``skills``, ``loops``.
"""
