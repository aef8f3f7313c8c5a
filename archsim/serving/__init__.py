"""Request-level serving simulation (issue 19): requests, KV tiers with a prefix cache, a discrete-event
continuous-batching engine and its metrics. Nothing here imports the memory kernel."""
