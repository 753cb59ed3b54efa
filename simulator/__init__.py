"""A fleet simulator that writes realistic shards with known, injected regressions.

``simulate_fleet(out, gpus=..., hours=..., seed=..., start=..., injections=None)`` writes all four
shard tables and ``ground_truth.json``; ``parse_injections`` turns ``--inject`` specs into
``Injection`` objects. See docs/simulator.md for the workloads, the noise model and the kinds.
"""

from __future__ import annotations

from simulator.engine import DEFAULT_DEVICE_INTERVAL_S, DEFAULT_WINDOW_S, GroundTruth, simulate_fleet
from simulator.injections import CORE_KINDS, EXTRA_KINDS, KINDS, Injection, default_injections, parse_injections

__all__ = [
    "simulate_fleet",
    "parse_injections",
    "default_injections",
    "Injection",
    "GroundTruth",
    "KINDS",
    "CORE_KINDS",
    "EXTRA_KINDS",
    "DEFAULT_WINDOW_S",
    "DEFAULT_DEVICE_INTERVAL_S",
]
