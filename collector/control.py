"""Adaptive duty cycling that keeps the collector under its overhead budget.

The design's adaptive sampling: every control period the collector traces for ``duty x period``
seconds and detaches CUPTI (``cuptiFinalize``) for the rest. After each on-phase it estimates what
tracing cost while on:

    cost = kernels x kernel_cost_s + copies x copy_cost_s + callback_factor x callback_s + overhead_records_s
    f_on = cost / (on_s - cost)     (slowdown of the application while tracing)

``kernel_cost_s`` (5.0 us) is CUPTI's launch-path cost per traced kernel with the binding's record
objects, measured on the H200's launch-bound loop with a callback that only counts
(``benchmarks/cupti_diag.py launch``: +5.0 us per launch; with records left inside CUPTI +5.2 us).
``callback_s`` is our own buffer callback, measured; it runs on CUPTI's thread holding the GIL, and
the launching thread loses ``callback_factor`` (1.6) times that (same probe: +2.3 us per launch for
1.44 us of callback per record). CUPTI OVERHEAD records add CUPTI's own in-path time. The estimate
counts host-side cost as if the program were launch-bound, so on GPU-bound work it is an upper
bound (the host cost hides behind the GPU): it errs towards staying inside the budget.

Each pause/resume cycle costs ``cycle_s``: the detach + re-attach time the collector thread
measures (16-77 ms on the H200), but at least ``CYCLE_FLOOR_S`` = 150 ms, what one cycle was seen to
cost the program on the mixed workload with cuBLAS loaded; the period is stretched until cycling
costs at most a quarter of the budget (30 s at the 2 % default). ``f_on`` (EWMA, weight 0.7 on the newest) and ``cycle_s`` (EWMA, 0.5) are
smoothed; the period is at most 30 s, or a longer ``CUDAWATCH_PERIOD_S``, and never longer than
the window (cudawatch.config.CollectorTiming: every window sees tracing). An on-phase that
traced nothing (idle GPU) teaches nothing and leaves the duty as it is, so a program that starts
its GPU work late still starts inside the budget. Until an on-phase has traced something the period
is at most the default 30 s (or what cycling needs at a low budget), even with a longer ``CUDAWATCH_PERIOD_S``: the first on-phase comes as
the collector starts, usually before the program's GPU work, and at a 120-s period (300 s) the
window that held the program's first 6,050 (13,230) training steps read no kernels on an H100
(docs/benchmarks.md §23, §22). A program that is idle from its start cycles at the default rate
until its first kernel. The duty is 1 (no cycling) when full tracing fits the budget, else
``(safety x budget - cycle_s / period) / f_on``. Before the first measurement the controller
assumes the worst case measured (full tracing doubling a launch-bound loop, ``F_ON_PRIOR`` = 1.5
with margin), so the first window is already inside the budget; afterwards it shrinks at once and
widens at most 4x per period, within ``[min_duty, 1]``. Pure arithmetic, no clock, no CUPTI:
tested on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cudawatch.config import DEFAULT_MAX_PERIOD_S

#: Defaults measured on an H200 with cupti-python 13.4.0 / libcupti 13.4.92, torch 2.11
#: (docs/collector.md, ``benchmarks/cupti_diag.py launch``): untraced 7.1 us per launch, traced with a
#: counting callback 12.1 us, with our callback 14.4 us (1.44 us of callback per record).
DEFAULT_KERNEL_COST_US = 5.0
DEFAULT_COPY_COST_US = 5.0
#: Launch-path time lost per second of our callback (it holds the GIL on CUPTI's thread).
CALLBACK_FACTOR = 1.6
#: Slowdown assumed while tracing before anything is measured (worst case seen: 1.0, launch-bound).
F_ON_PRIOR = 1.5
#: What one detach + re-attach costs the program at least (seconds). The collector thread measures
#: 16-77 ms per cycle, but on the H200 mixed workload (cuBLAS loaded) one cycle cost the program
#: ~160 ms (2.7 % of a 6 s run at 0.5 % duty, docs/benchmarks.md); the estimate uses the larger one.
CYCLE_FLOOR_S = 0.15
CYCLE_PRIOR_S = CYCLE_FLOOR_S


@dataclass
class Estimate:
    on_s: float
    cost_s: float
    records: int = -1  # kernels + copies traced in the on-phase (-1: not given)

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
        min_duty: never trace less than this fraction (keeps every window sampled; default a quarter
            of the budget, 0.5 % at the 2 % default).
        safety: aim at ``safety x budget`` so noise does not push the estimate over budget.
    """

    def __init__(self, budget_pct: float = 2.0, *, kernel_cost_s: float | None = None, copy_cost_s: float | None = None,
                 min_duty: float | None = None, initial_duty: float | None = None, safety: float = 0.8,
                 min_period_s: float = 1.0, max_period_s: float = DEFAULT_MAX_PERIOD_S, callback_factor: float = CALLBACK_FACTOR,
                 cycle_floor_s: float = CYCLE_FLOOR_S) -> None:
        if not 0 < budget_pct <= 100:
            raise ValueError(f"budget_pct must be in (0, 100], got {budget_pct}")
        self.budget = budget_pct / 100.0
        self.kernel_cost_s = kernel_cost_s if kernel_cost_s is not None else float(os.environ.get("CUDAWATCH_KERNEL_COST_US", DEFAULT_KERNEL_COST_US)) * 1e-6
        self.copy_cost_s = copy_cost_s if copy_cost_s is not None else DEFAULT_COPY_COST_US * 1e-6
        # floor: even a launch-bound load (f_on = 1) at the floor spends only a quarter of the budget
        self.min_duty = min_duty if min_duty is not None else 0.25 * self.budget
        self.safety = safety
        self.callback_factor = callback_factor
        self.cycle_floor_s = cycle_floor_s
        self.f_on: float | None = None  # smoothed on-phase overhead fraction
        self.cycle_s: float = max(CYCLE_PRIOR_S, cycle_floor_s) if cycle_floor_s else CYCLE_PRIOR_S  # smoothed cost of one pause + resume
        self._cycle_measured = False
        self.min_period_s, self.max_period_s = min_period_s, max_period_s
        if initial_duty is None:  # inside the budget even if tracing turns out to cost F_ON_PRIOR
            initial_duty = self._target(F_ON_PRIOR)
        self.duty = max(self.min_duty, min(1.0, initial_duty))

    @classmethod
    def for_timing(cls, budget_pct: float, timing) -> "DutyController":
        """The controller a session runs with ``timing`` (a ``cudawatch.config.CollectorTiming``): its
        shortest and longest control period; ``cudawatch doctor`` builds the same one."""
        return cls(budget_pct, min_period_s=timing.min_period_s, max_period_s=timing.max_period_s)

    def note_cycle(self, seconds: float) -> None:
        """Record the measured time of one pause (detach) + resume (attach)."""
        seconds = max(seconds, self.cycle_floor_s)
        self.cycle_s = seconds if not self._cycle_measured else 0.5 * self.cycle_s + 0.5 * seconds
        self._cycle_measured = True

    def _cycling_needs_s(self) -> float:
        """The period at which pause/resume cycles cost a quarter of the budget."""
        return self.cycle_s / (0.25 * self.budget)

    def steady_period_s(self) -> float:
        """Control period once an on-phase has traced something: long enough that pause/resume cycles
        cost at most 1/4 of the budget, within ``[min_period_s, max_period_s]``."""
        return max(self.min_period_s, min(self.max_period_s, self._cycling_needs_s()))

    def start_period_s(self) -> float:
        """Control period until an on-phase has traced something: ``steady_period_s``, but at most
        ``DEFAULT_MAX_PERIOD_S`` unless cycling itself needs longer (a low budget; the module docstring)."""
        return min(self.steady_period_s(), max(DEFAULT_MAX_PERIOD_S, self._cycling_needs_s()))

    def period_s(self) -> float:
        """Control period: ``start_period_s`` until an on-phase has traced something, then ``steady_period_s``."""
        return self.steady_period_s() if self.f_on is not None else self.start_period_s()

    def estimate(self, on_s: float, kernels: int, copies: int, callback_s: float, overhead_s: float) -> Estimate:
        """Estimated cost of one on-phase (see the module docstring)."""
        cost = kernels * self.kernel_cost_s + copies * self.copy_cost_s + self.callback_factor * callback_s + overhead_s
        return Estimate(on_s=on_s, cost_s=cost, records=kernels + copies)

    def update(self, est: Estimate) -> float:
        """Next duty from the last on-phase's estimate; returns it and keeps it in ``self.duty``."""
        if est.on_s < 0.005 or est.records == 0:  # too short, or an idle GPU: nothing learned
            return self.duty
        f = est.fraction_on
        self.f_on = f if self.f_on is None else 0.3 * self.f_on + 0.7 * f
        target = max(self.min_duty, min(1.0, self._target(self.f_on)))
        if target < self.duty:
            self.duty = target
        else:
            self.duty = min(target, self.duty * 4.0)
        return self.duty

    def _target(self, f_on: float) -> float:
        """Largest duty whose tracing plus cycling cost stays at ``safety x budget``."""
        goal = self.safety * self.budget
        if f_on <= goal:
            return 1.0
        return max(goal - self.cycle_s / self.period_s(), 0.0) / f_on
