"""Activities of the agent kernel: the only place where user-level IO happens."""
