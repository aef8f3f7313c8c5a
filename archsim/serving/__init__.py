"""Request-level serving: what users send (requests, scenarios, traces), KV tiers with a prefix cache, the
discrete-event engine and its metrics. docs/design-serving.md gives the design, docs/serving.md the use.

Nothing here imports the memory kernel: requests and scenarios are numpy only.
"""

from archsim.serving.requests import RequestTable

__all__ = ["RequestTable"]
