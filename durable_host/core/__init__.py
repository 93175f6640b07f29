"""The pure replay core: what a Durable Functions runtime decides, with no IO.

Histories and their events (``history``), the records the engine and the stores share
(``records``), the SDK's wire shapes (``wire``), the shim that walks the SDK's actions against
a history (``shim``), replay and its optimisations (``replay``, ``sessions``), one
orchestration or entity episode (``orchestration``, ``entity``), rewind and the version rules
(``rewind``, ``versioning``).

May import: the SDKs and the standard library; nothing of the host outside ``core``.
Must never import: asyncio, sqlite3, aiohttp, the Azure SDKs, OpenTelemetry, and no other
package of the host. Every other layer may import it.
"""
