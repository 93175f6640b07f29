"""Durable entities of the agent kernel. Each delegates its state changes to ``kernel/``."""
