"""Request-level serving: what users send (requests, scenarios, traces), KV tiers with a prefix cache, the
discrete-event engine and its metrics. docs/design-serving.md gives the design, docs/scenarios.md the inputs.

Nothing here imports the memory kernel: requests and scenarios are numpy only.
"""

from archsim.serving.mooncake import read_mooncake, write_mooncake
from archsim.serving.requests import RequestTable
from archsim.serving.scenario import Scenario, load_scenario

__all__ = ["RequestTable", "Scenario", "load_scenario", "read_mooncake", "write_mooncake"]
