"""The generic JSON webhook (``CUDAWATCH_WEBHOOK_URL``): one POST per incident.

Payload (documented in docs/alerts.md), schema ``cudawatch.alert.v2`` -- v1's fields with the
same meaning, about the incident's top member, plus the incident::

    {"schema": "cudawatch.alert.v2", "idempotency_key": "<message id>", "event_id": "<top member's event_id>",
     "created_at": "<ISO time the alert was queued>", "report_url": "<url or null>",
     "regression": {... Regression.to_json() ..., "findings": [{"rule", "confidence", "evidence", "recommendation"}, ...]},
     "incident": {"incident_id", "update": "new" | "escalated", "cause", "severity", "onset", "scope", "key",
                  "jobs", "member_count", "new_event_ids", "members": [<regression as above>, ...]}}

The message id is the incident id (for a one-member incident: its event id, as in v1), or
``<incident id>-<severity>`` for an escalation. The request also carries the header
``Idempotency-Key: <message id>``. The body is fixed when the
alert is queued, so every retry sends the same bytes and a receiver can drop a repeat by the key.
JSON escaping is all a JSON receiver needs; the strings are the raw names (receivers that render
HTML must escape them).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from analytics.incidents import Incident
from analytics.results import Regression

SCHEMA = "cudawatch.alert.v2"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def regression_body(r: Regression) -> dict[str, Any]:
    """One regression as the webhook carries it (v1's ``regression`` object)."""
    body = r.to_json()
    body["kernel"] = r.kernel
    body["detected_at"] = r.detected_at.isoformat() if r.detected_at else None
    body["findings"] = [
        {"rule": f.rule, "confidence": f.confidence, "evidence": _jsonable(dict(f.evidence)), "recommendation": f.recommendation}
        for f in sorted(r.causes, key=lambda f: -f.confidence)
    ]
    return _jsonable(body)


def build_payload(inc: Incident, report_url: str | None, created_at: dt.datetime, *, message_id: str | None = None,
                  update: str = "new", new_event_ids: list[str] | None = None) -> dict[str, Any]:
    """The webhook body for one incident (``update`` "new", or "escalated" when a later hour
    raised its severity; ``new_event_ids``: the members this message announces, default all)."""
    if update not in ("new", "escalated"):
        raise ValueError(f"update must be 'new' or 'escalated', not {update!r}")
    members = [regression_body(r) for r in inc.members]
    return {
        "schema": SCHEMA,
        "idempotency_key": message_id or inc.incident_id,
        "event_id": inc.top.event_id,
        "created_at": created_at.isoformat(),
        "report_url": report_url,
        "regression": members[0],
        "incident": {
            "incident_id": inc.incident_id, "update": update, "cause": inc.cause, "severity": inc.severity,
            "onset": inc.onset.isoformat(), "scope": inc.scope, "key": inc.key, "jobs": list(inc.jobs),
            "member_count": len(members),
            "new_event_ids": list(new_event_ids) if new_event_ids is not None else [r.event_id for r in inc.members],
            "members": members,
        },
    }


def headers_for(message_id: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Idempotency-Key": message_id, "User-Agent": "cudawatch-alerts/2"}
