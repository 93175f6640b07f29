"""IO adapters behind small ports: content store, attempt ledger, model providers."""
