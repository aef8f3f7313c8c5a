"""Request-level serving simulation (issue 19): requests, the tiered KV prefix cache, link sharing, the engine."""
