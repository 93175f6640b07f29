"""Storage port of the durable host and its implementations."""
