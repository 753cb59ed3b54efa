"""The generic JSON webhook (``CUDAWATCH_WEBHOOK_URL``): one POST per regression event.

Payload (documented in docs/alerts.md), schema ``cudawatch.alert.v1``::

    {"schema": "cudawatch.alert.v1", "idempotency_key": "<event_id>", "event_id": "<event_id>",
     "created_at": "<ISO time the alert was queued>", "report_url": "<url or null>",
     "regression": {... Regression.to_json() ...,
                    "findings": [{"rule", "confidence", "evidence", "recommendation"}, ...]}}

The request also carries the header ``Idempotency-Key: <event_id>``. The body is fixed when the
alert is queued, so every retry sends the same bytes and a receiver can drop a repeat by the key.
JSON escaping is all a JSON receiver needs; the strings are the raw names (receivers that render
HTML must escape them).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from analytics.results import Regression

SCHEMA = "cudawatch.alert.v1"


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


def build_payload(r: Regression, report_url: str | None, created_at: dt.datetime) -> dict[str, Any]:
    """The webhook body for one regression event."""
    body = r.to_json()
    body["kernel"] = r.kernel
    body["detected_at"] = r.detected_at.isoformat() if r.detected_at else None
    body["findings"] = [
        {"rule": f.rule, "confidence": f.confidence, "evidence": _jsonable(dict(f.evidence)), "recommendation": f.recommendation}
        for f in sorted(r.causes, key=lambda f: -f.confidence)
    ]
    return {
        "schema": SCHEMA,
        "idempotency_key": r.event_id,
        "event_id": r.event_id,
        "created_at": created_at.isoformat(),
        "report_url": report_url,
        "regression": _jsonable(body),
    }


def headers_for(event_id: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Idempotency-Key": event_id, "User-Agent": "cudawatch-alerts/1"}
