"""Root-cause rules: say why a regression happened, with evidence (see docs/root-cause.md).

Each rule is one small function ``rule(ctx: RegressionContext) -> Finding | None`` in a module per
family (``kernels``, ``memcpy``, ``device``, ``regime``), in the spirit of Nsight Compute's rule
sections and Holistic Trace Analysis' analyses. ``attach_causes`` loads every regression's context
(analytics.store.context), runs all rules, ranks findings by confidence and stores them in ``findings``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Iterable

from analytics.context import RegressionContext
from analytics.store.context import load_context
from analytics.results import Finding, Regression
from analytics.store.regressions import FINDINGS_DDL, store_findings
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


def attach_causes(con, regressions: list[Regression], *, hours: int = 24, rules: Iterable[Rule] = ALL_RULES,
                  as_of=None) -> list[Regression]:
    """Return copies of ``regressions`` with ``causes`` filled, and store them in ``findings``.

    hours: length of the before and after windows around each onset. as_of: the hour of the run
    (the after windows end there; analytics.store.context.load_context). Re-running replaces the
    stored findings of the same events (idempotent).
    """
    rules = tuple(rules)
    out, explained = [], []
    for r in regressions:
        try:
            ctx = load_context(con, r, hours, as_of=as_of)
        except Exception:  # noqa: BLE001 - one unreadable context must not drop the other events
            log.exception("could not load the context of regression %s (%s, %s)", r.event_id, r.job, r.series)
            out.append(r)  # its stored findings from an earlier run are kept, not wiped
            continue
        explained.append(dataclasses.replace(r, causes=evaluate(ctx, rules)))
        out.append(explained[-1])
    store_findings(con, explained)
    return out




__all__ = ["RULES", "ALL_RULES", "FINDINGS_DDL", "attach_causes", "evaluate", "store_findings", "load_context", *RULES]
