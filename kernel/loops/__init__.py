"""Agent loops (``loop``): a prompt submitted to a session on a schedule (``cron``).
May import every kernel package but ``skills``."""
