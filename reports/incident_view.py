"""Incidents as the report shows them: regressions grouped by analytics.incidents, in the report's order.

The daily report, its plain-text version, the e-mail and the terminal list incidents first and their
members inside; ``incident_order`` is the one order they all use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing import Mapping

from analytics.incidents import Incident, adopt_ids, group_incidents
from analytics.results import SEVERITIES, Regression
from reports.jinja import STATUS_ORDER


@dataclass
class ReportIncident:
    """An incident as the report shows it: the incident, its status on the report day (the most
    current of its members': new, else ongoing, else resolved) and its members' items in order."""

    incident: Incident
    status: str
    items: list = field(default_factory=list)  # reports.render.ReportItem, in the incident's order
    number: int = 0

    @property
    def anchor(self) -> str:
        return f"i-{self.incident.incident_id}"

    @property
    def where(self) -> str:
        """``GPU host:index`` or ``job NAME`` (raw: templates escape it)."""
        return self.incident.where

    @property
    def cause(self) -> str:
        return self.incident.cause_label


def incident_order(classified: list[tuple[str, Regression]], known: Mapping[str, str] | None = None,
                   ) -> list[tuple[Incident, str, list[tuple[str, Regression]]]]:
    """``classify``'s output grouped into incidents (analytics.incidents.group_incidents): incidents
    by status (new, ongoing, resolved), then severity (worst first), then onset; members in the
    incident's order (most severe, largest impact first). Every regression appears once.
    known: event id -> the incident id it was alerted under (``outbox.incident_ids``), so the
    report names an incident as its alert did."""
    status = {r.event_id: st for st, r in classified}
    out = []
    for inc in adopt_ids(group_incidents([r for _, r in classified]), known or {}):
        members = [(status[r.event_id], r) for r in inc.members]
        st = min((s for s, _ in members), key=STATUS_ORDER.index)
        out.append((inc, st, members))
    out.sort(key=lambda x: (STATUS_ORDER.index(x[1]), -SEVERITIES.index(x[0].severity), x[0].onset, x[0].incident_id))
    return out
