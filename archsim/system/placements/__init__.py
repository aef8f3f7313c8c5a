"""Placements: where a system keeps the KV cache and where attention runs, one strategy module each.

`placement_of(system)` is the one that serves the system (`kv.location`, `attention`); `base.Placement` is the
interface the decode-step model, the mixed-batch step and the energy model call. A new placement is one module
with a `Placement` subclass, added to `PLACEMENTS`, and its test (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.system.placements.base import Breakdown, LayerContext, LayerTimes, Placement
from archsim.system.placements.fetch import FetchPlacement
from archsim.system.placements.hbm import HbmPlacement
from archsim.system.placements.pnm import PnmPlacement

if TYPE_CHECKING:
    from archsim.system.config import SystemConfig

# by `kind`; each system is served by exactly one (tests/test_placements.py)
PLACEMENTS: dict[str, Placement] = {p.kind: p for p in (HbmPlacement(), FetchPlacement(), PnmPlacement())}


def placement_of(system: SystemConfig) -> Placement:
    """The placement that serves `system`."""
    for placement in PLACEMENTS.values():
        if placement.serves(system):
            return placement
    raise ValueError(f"{system.name}: no placement serves kv.location {system.kv_location!r} with attention "
                     f"{system.attention!r}")


__all__ = ["PLACEMENTS", "Breakdown", "LayerContext", "LayerTimes", "Placement", "placement_of"]
