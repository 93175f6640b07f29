"""A session's workspace as data (``files``: paths, manifests, snapshots, differences) and the
environment a turn runs in (``environment``). May import ``common``; nothing else of the kernel."""
