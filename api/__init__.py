"""The agent kernel's HTTP API (HTTP-triggered functions)."""
