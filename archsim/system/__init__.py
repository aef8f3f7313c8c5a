"""Whole systems: GPU hosts, interconnect and a KV memory pool with near-memory compute; the decode-step model.

`load_system_config` / `load_workload` read the YAML; `simulate_step` runs one decode step of a workload at
one context on one system (archsim/system/decode.py); `compare` runs many. docs/systems.md describes it all.
"""

from archsim.system.config import SystemConfig, load_system_config, system_config_from_mapping
from archsim.system.decode import StepResult, simulate_step
from archsim.system.workload import Workload, load_workload, workload_from_mapping, workload_from_trace

__all__ = [
    "StepResult",
    "SystemConfig",
    "Workload",
    "load_system_config",
    "load_workload",
    "simulate_step",
    "system_config_from_mapping",
    "workload_from_mapping",
    "workload_from_trace",
]
