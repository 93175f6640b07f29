"""Orchestrators of the agent kernel: replayed code, deterministic generators only."""
