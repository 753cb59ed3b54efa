"""Root-cause rules: say why a regression happened, with evidence (see docs/root-cause.md).

Each rule is one small function ``rule(ctx: RegressionContext) -> Finding | None`` in a module per
family (``kernels``, ``memcpy``, ``device``, ``regime``), in the spirit of Nsight Compute's rule
sections and Holistic Trace Analysis' analyses. ``attach_causes`` loads every regression's context
(analytics.store.context), runs all rules, ranks findings by confidence and stores them in ``findings``.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from analytics.context import RegressionContext
from analytics.results import Finding
from analytics.rules import device as _device, kernels as _kernels, memcpy as _memcpy, regime as _regime
from analytics.rules.device import clock_throttle, contention, gpu_idle_gaps, straggler_gpu
from analytics.rules.kernels import kernel_slower, kernel_vanished, launch_config_changed, more_launches, new_kernel
from analytics.rules.memcpy import memcpy_throughput_drop, pageable_memcpy
from analytics.rules.regime import compute_bound, memory_bound, transfer_bound

log = logging.getLogger(__name__)

Rule = Callable[[RegressionContext], "Finding | None"]

#: Every rule, in the order of the fixed vocabulary ``RULES``.
ALL_RULES: tuple[Rule, ...] = (
    kernel_slower, launch_config_changed, new_kernel, kernel_vanished, more_launches, pageable_memcpy,
    memcpy_throughput_drop, clock_throttle, straggler_gpu, gpu_idle_gaps, contention, compute_bound,
    memory_bound, transfer_bound,
)

#: The fixed vocabulary of ``causes`` in ``cudawatch analyze --json``.
RULES: tuple[str, ...] = tuple(rule.__name__ for rule in ALL_RULES)

#: Evidence in plain words: one Jinja template per rule, kept next to the rule in its module
#: (rendered by reports.evidence; the raw numbers stay in ``findings.evidence``).
EVIDENCE_TEMPLATES: dict[str, str] = {**_kernels.EVIDENCE, **_memcpy.EVIDENCE, **_device.EVIDENCE, **_regime.EVIDENCE}



def evaluate(ctx: RegressionContext, rules: Iterable[Rule] = ALL_RULES) -> tuple[Finding, ...]:
    """Run ``rules`` on one context; findings ranked by confidence (highest first, ties in RULES order).

    A rule that raises is logged and skipped, so one bad input does not hide the other causes.
    """
    found = []
    for order, rule in enumerate(rules):
        try:
            f = rule(ctx)
        except Exception:  # noqa: BLE001 - a broken rule must not stop the others
            log.exception("root-cause rule %s failed on %s", getattr(rule, "__name__", rule), ctx.regression.event_id)
            continue
        if f is not None:
            found.append((-f.confidence, order, f))
    return tuple(f for _, _, f in sorted(found, key=lambda t: t[:2]))


__all__ = ["RULES", "ALL_RULES", "EVIDENCE_TEMPLATES", "evaluate", *RULES]
