"""The HTTP front door: what every route shares.

The listener (``listener``), request limits and body reading (``limits``), CORS (``cors``), the
host's keys and who may call what (``keys``, ``auth``) and the key management routes
(``key_routes``).

May import: ``core``, ``ops``, ``functions``, ``engine`` (the client's errors). Must never import:
``triggers`` or the composition; ``keys`` imports nothing of the host at all, so the command
line shares it.
"""
