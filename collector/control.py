"""Adaptive duty cycling that keeps the collector under its overhead budget.

The design's adaptive sampling: every control period the collector traces for ``duty x period``
seconds and detaches CUPTI (``cuptiFinalize``) for the rest. After each on-phase it estimates what
tracing cost while on:

    cost = kernels x kernel_cost_s + copies x copy_cost_s + callback_s + overhead_records_s
    f_on = cost / (on_s - cost)     (slowdown of the application while tracing)

``kernel_cost_s`` is the calibrated host-side cost per traced kernel launch outside our callback
(CUPTI's launch-path instrumentation, the binding's record object and the GIL hand-offs, measured on
the H200's launch-bound loop, docs/benchmarks.md); ``callback_s`` is measured (our Python
buffer callback); CUPTI OVERHEAD records add CUPTI's own instrumentation time in the launch path.
Each pause/resume cycle also costs ``cycle_s`` (detach + re-attach, measured, larger when big
modules such as cuBLAS are loaded), so the period is stretched until cycling costs at most a
quarter of the budget. ``f_on`` (EWMA, weight 0.7 on the newest) and ``cycle_s`` (EWMA, 0.5) are smoothed. The duty is 1 (no
cycling) when full tracing fits the budget, else ``(safety x budget - cycle_s / period) / f_on``;
it shrinks at once and widens at most 4x per period, within ``[min_duty, 1]``. Pure arithmetic, no
clock, no CUPTI: tested on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Defaults measured on an H200 with cupti-python 13.4 (docs/benchmarks.md).
#: Host-side cost per traced kernel outside our callback (H200, cupti-python 13.4, torch 2.11: the
#: launch-bound loop went from ~7.5 us to ~15 us per launch under full tracing, ~2 us of it in our
#: callback).
DEFAULT_KERNEL_COST_US = 5.5
DEFAULT_COPY_COST_US = 5.5


@dataclass
class Estimate:
    on_s: float
    cost_s: float

    @property
    def fraction_on(self) -> float:
        """Slowdown while tracing: cost over the time the program would have taken without it."""
        if self.on_s <= 0:
            return 0.0
        return self.cost_s / max(self.on_s - self.cost_s, 0.05 * self.on_s)


class DutyController:
    """Chooses the traced fraction of each control period.

    Args:
        budget_pct: overhead budget in percent of run time (``CUDAWATCH_MAX_OVERHEAD_PCT``).
        kernel_cost_s / copy_cost_s: calibrated per-record instrumentation cost in seconds.
        min_duty: never trace less than this fraction (keeps every window sampled).
        safety: aim at ``safety x budget`` so noise does not push the estimate over budget.
    """

    def __init__(self, budget_pct: float = 2.0, *, kernel_cost_s: float | None = None, copy_cost_s: float | None = None,
                 min_duty: float = 0.01, initial_duty: float = 0.1, safety: float = 0.8,
                 min_period_s: float = 1.0, max_period_s: float = 10.0) -> None:
        if not 0 < budget_pct <= 100:
            raise ValueError(f"budget_pct must be in (0, 100], got {budget_pct}")
        self.budget = budget_pct / 100.0
        self.kernel_cost_s = kernel_cost_s if kernel_cost_s is not None else float(os.environ.get("CUDAWATCH_KERNEL_COST_US", DEFAULT_KERNEL_COST_US)) * 1e-6
        self.copy_cost_s = copy_cost_s if copy_cost_s is not None else DEFAULT_COPY_COST_US * 1e-6
        self.min_duty = min_duty
        self.safety = safety
        self.duty = max(min_duty, min(1.0, initial_duty))
        self.f_on: float | None = None  # smoothed on-phase overhead fraction
        self.cycle_s: float = 0.0  # smoothed cost of one pause + resume
        self.min_period_s, self.max_period_s = min_period_s, max_period_s

    def note_cycle(self, seconds: float) -> None:
        """Record the measured time of one pause (detach) + resume (attach)."""
        self.cycle_s = seconds if self.cycle_s == 0.0 else 0.5 * self.cycle_s + 0.5 * seconds

    def period_s(self) -> float:
        """Control period: long enough that pause/resume cycles cost at most 1/4 of the budget."""
        want = self.cycle_s / (0.25 * self.budget) if self.cycle_s > 0 else self.min_period_s
        return max(self.min_period_s, min(self.max_period_s, want))

    def estimate(self, on_s: float, kernels: int, copies: int, callback_s: float, overhead_s: float) -> Estimate:
        """Estimated cost of one on-phase (see the module docstring)."""
        cost = kernels * self.kernel_cost_s + copies * self.copy_cost_s + callback_s + overhead_s
        return Estimate(on_s=on_s, cost_s=cost)

    def update(self, est: Estimate) -> float:
        """Next duty from the last on-phase's estimate; returns it and keeps it in ``self.duty``."""
        if est.on_s < 0.005:  # too short to say anything
            return self.duty
        f = est.fraction_on
        self.f_on = f if self.f_on is None else 0.3 * self.f_on + 0.7 * f
        goal = self.safety * self.budget
        if self.f_on <= goal:
            target = 1.0
        else:
            target = max(goal - self.cycle_s / self.period_s(), 0.0) / self.f_on
        target = max(self.min_duty, min(1.0, target))
        if target < self.duty:
            self.duty = target
        else:
            self.duty = min(target, self.duty * 4.0)
        return self.duty
