"""The agent kernel's pure core: every decision of the app, with no IO.

The packages are layers; each may import only those above it in this list:

* ``common``     errors, ids, text, statuses, versions, content references, concurrency limits;
* ``workspace``  a session's workspace as data, and the environment a turn runs in;
* ``session``    the session document: state, entries, pages, documents, requests,
                 submissions, the task graph, the commit reducer, previews, retention;
* ``turn``       the model's shapes, the offline planner, the tool catalogue, the turn's
                 policies, failure handling, approval tokens;
* ``skills``, ``loops``  procedures as data and agent loops, built on the turn.

Nothing here imports the host, the adapters, the activities, asyncio, aiohttp or the Azure
SDKs (``tests/unit/durable_host/test_layering.py``).
"""
