"""Root cause for a batch of regressions: load each context from the store, run the rules
(analytics.rules.evaluate, pure), store the ranked findings in ``findings``."""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable

from analytics.results import Regression
from analytics.rules import ALL_RULES, Rule, evaluate
from analytics.store.context import load_context
from analytics.store.regressions import store_findings

log = logging.getLogger(__name__)


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
