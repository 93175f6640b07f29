"""HTTP fronts of the host: the app's HTTP triggers, the durable management API."""
