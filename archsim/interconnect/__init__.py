"""Links, switches and routes between GPUs and memory pools; flow-level max-min fair bandwidth sharing."""

from archsim.interconnect.flows import (
    Epoch,
    Flow,
    FlowResult,
    FlowSchedule,
    LinkUsage,
    allocate,
    max_min_rates,
    simulate_flows,
)
from archsim.interconnect.topology import PRESETS_DIR, Endpoint, Hop, Link, Route, Switch, Topology, parse_topology

__all__ = [
    "PRESETS_DIR",
    "Endpoint",
    "Epoch",
    "Flow",
    "FlowResult",
    "FlowSchedule",
    "Hop",
    "Link",
    "LinkUsage",
    "Route",
    "Switch",
    "Topology",
    "allocate",
    "max_min_rates",
    "parse_topology",
    "simulate_flows",
]
