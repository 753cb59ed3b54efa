"""Regressions as incidents for the terminal and ``--format json`` (analyze, demo): the daily report's order."""

from __future__ import annotations


#: the shape of ``cudawatch analyze --format json`` (docs/detection.md): v1 was the bare list now under "regressions"
ANALYZE_SCHEMA = "cudawatch.analyze.v2"


def analyze_json(incidents) -> dict:
    """``{"schema", "incidents": [incident with its members], "regressions": [every member, flat,
    with its "incident_id"]}``, both in the daily report's order."""
    return {"schema": ANALYZE_SCHEMA, "incidents": [inc.to_json() for inc in incidents],
            "regressions": [{**r.to_json(), "incident_id": inc.incident_id} for inc in incidents for r in inc.members]}


def incident_cell(number: int, inc) -> str:
    """``#2`` for a one-regression incident, ``#1 (12)`` for the first of a 12-member one."""
    return f"#{number}" + (f" ({len(inc.members)})" if len(inc.members) > 1 else "")


def report_incidents(regressions, as_of, known=None):
    """The incidents of ``regressions`` (analytics.incidents) in the daily report's order for the
    day of ``as_of`` (reports.render.classify, reports.incident_view.incident_order); regressions
    outside that day follow, grouped the same way. known: event id -> the incident id it was
    alerted under (``analytics.store.outbox.incident_ids``; the report reads the same)."""
    from analytics.incidents import adopt_ids, group_incidents

    known = known or {}
    if not regressions or as_of is None:
        return adopt_ids(group_incidents(regressions), known)
    from analytics.store.report import day_window
    from reports.render import classify, incident_order

    start, end = day_window(as_of.date())
    ordered = [inc for inc, _, _ in incident_order(classify(regressions, start, end), known)]
    seen = {r.event_id for inc in ordered for r in inc.members}
    return ordered + adopt_ids(group_incidents([r for r in regressions if r.event_id not in seen]), known)
