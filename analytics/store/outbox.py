"""The alert outbox: a DuckDB table that makes alert delivery survive crashes and outages.

Transactional outbox pattern (Richardson, microservices.io "Transactional outbox"): an alert is
first written, with its final JSON body, to ``alert_outbox`` in one transaction; only then is it
sent; the row is marked ``sent`` after the endpoint answers 2xx. Each attempt is recorded
*before* the request (``attempts`` + 1 and a short lease in ``next_attempt_at``), so:

* a crash before the request: the row is pending; the next run sends it (nothing lost);
* a crash after the endpoint accepted but before ``sent`` was recorded: the next run after the
  lease sends the *same body* again. Delivery is therefore at-least-once. The generic webhook
  carries ``Idempotency-Key: <event_id>`` so its receiver can make the effect exactly-once;
  Slack incoming webhooks have no idempotency key, so that narrow window can repeat a Slack message;
* endpoint down: the row stays ``pending`` with a backed-off ``next_attempt_at`` and is retried
  by every later run until it is sent or older than ``RetryPolicy.give_up_after`` (then ``failed``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Iterable

from analytics.store.tx import transaction

DDL = """
CREATE TABLE IF NOT EXISTS alert_outbox (
    event_id VARCHAR NOT NULL,          -- the message id: the incident id, or <incident id>-<severity> for an escalation
    channel VARCHAR NOT NULL,           -- slack | webhook
    event_ids VARCHAR[] NOT NULL,       -- the regression events this message carries
    payload VARCHAR NOT NULL,           -- the JSON body, fixed when queued
    state VARCHAR NOT NULL DEFAULT 'pending',  -- pending | sent | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    last_error VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    sent_at TIMESTAMPTZ,
    incident_id VARCHAR,                -- the incident the message is about (NULL: a v1 per-event row)
    severity VARCHAR,                   -- the incident's severity the message announced
    PRIMARY KEY (event_id, channel)
)
"""

#: Columns added after v1 (warehouses created before keep their table; ensure_outbox adds them).
_ADDED = (("incident_id", "VARCHAR"), ("severity", "VARCHAR"))

STATES = ("pending", "sent", "failed")


@dataclass(frozen=True)
class OutboxRow:
    event_id: str
    channel: str
    event_ids: tuple[str, ...]
    payload: str
    state: str
    attempts: int
    next_attempt_at: dt.datetime
    last_error: str | None
    created_at: dt.datetime
    sent_at: dt.datetime | None

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.payload)


_COLUMNS = "event_id, channel, event_ids, payload, state, attempts, next_attempt_at, last_error, created_at, sent_at"


def ensure_outbox(con) -> None:
    con.execute(DDL)
    for name, kind in _ADDED:
        con.execute(f"ALTER TABLE alert_outbox ADD COLUMN IF NOT EXISTS {name} {kind}")


def carried(con, channel: str) -> dict[str, tuple[str | None, str | None]]:
    """Regression events already in the outbox for ``channel`` (any state) -> (incident id,
    severity announced) of the message that carried them; (None, None) for v1 per-event rows."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for eid, iid, sev in con.execute(
            "SELECT unnest(event_ids), incident_id, severity FROM alert_outbox WHERE channel = ? ORDER BY created_at, event_id",
            [channel]).fetchall():
        out.setdefault(eid, (iid, sev))
    return out


def incident_ids(con) -> dict[str, str]:
    """Regression event -> the incident id it was first alerted under on any channel (a row from
    before incidents: the event's own id), for views that show incidents under the alert's id
    (``analytics.incidents.adopt_ids``). Read-only; {} before any alert."""
    cols = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'alert_outbox'").fetchall()}
    if not cols:
        return {}
    iid = "incident_id" if "incident_id" in cols else "NULL"  # a v1 table opened read-only
    out: dict[str, str] = {}
    for eid, inc in con.execute(f"SELECT unnest(event_ids), {iid} FROM alert_outbox ORDER BY created_at, event_id").fetchall():
        out.setdefault(eid, inc or eid)
    return out


def enqueue(con, messages: Iterable[tuple[str, str, list[str], dict[str, Any], str, str]], now: dt.datetime) -> int:
    """Queue messages ``(message_id, channel, event_ids, body, incident_id, severity)`` in one
    transaction; a message id already queued for the channel is ignored. Returns how many rows were added."""
    rows = [(mid, ch, list(eids), json.dumps(body, ensure_ascii=False, sort_keys=True), now, now, iid, sev)
            for mid, ch, eids, body, iid, sev in messages]
    if not rows:
        return 0
    before = con.execute("SELECT count(*) FROM alert_outbox").fetchone()[0]
    with transaction(con):
        con.executemany(
            "INSERT OR IGNORE INTO alert_outbox (event_id, channel, event_ids, payload, next_attempt_at, created_at, incident_id, severity) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    return con.execute("SELECT count(*) FROM alert_outbox").fetchone()[0] - before


def due(con, now: dt.datetime, channel: str | None = None) -> list[OutboxRow]:
    """Pending messages whose next attempt time has come, oldest first."""
    sql = f"SELECT {_COLUMNS} FROM alert_outbox WHERE state = 'pending' AND next_attempt_at <= ?"
    params: list[Any] = [now]
    if channel:
        sql += " AND channel = ?"
        params.append(channel)
    return [_row(r) for r in con.execute(sql + " ORDER BY created_at, event_id", params).fetchall()]


def rows(con, state: str | None = None) -> list[OutboxRow]:
    sql = f"SELECT {_COLUMNS} FROM alert_outbox"
    params = []
    if state:
        sql += " WHERE state = ?"
        params.append(state)
    return [_row(r) for r in con.execute(sql + " ORDER BY created_at, channel, event_id", params).fetchall()]


def _row(r) -> OutboxRow:
    return OutboxRow(r[0], r[1], tuple(r[2]), r[3], r[4], r[5], r[6], r[7], r[8], r[9])


def record_attempt(con, row: OutboxRow, lease_until: dt.datetime, now: dt.datetime) -> None:
    """Count an attempt before it is made (committed at once), leasing the row until
    ``lease_until`` so a crash mid-request is retried only after the lease."""
    con.execute(
        "UPDATE alert_outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? "
        "WHERE event_id = ? AND channel = ? AND state = 'pending'",
        [lease_until, f"in flight since {now.isoformat()}", row.event_id, row.channel],
    )


def mark_sent(con, row: OutboxRow, now: dt.datetime) -> None:
    con.execute("UPDATE alert_outbox SET state = 'sent', sent_at = ?, last_error = NULL WHERE event_id = ? AND channel = ?",
                [now, row.event_id, row.channel])


def mark_retry(con, row: OutboxRow, next_attempt_at: dt.datetime, error: str | None) -> None:
    con.execute("UPDATE alert_outbox SET next_attempt_at = ?, last_error = ? WHERE event_id = ? AND channel = ?",
                [next_attempt_at, (error or "")[:1000], row.event_id, row.channel])


def mark_failed(con, row: OutboxRow, error: str | None) -> None:
    con.execute("UPDATE alert_outbox SET state = 'failed', last_error = ? WHERE event_id = ? AND channel = ?",
                [(error or "")[:1000], row.event_id, row.channel])


def requeue_failed(con, now: dt.datetime, channel: str | None = None) -> int:
    """Put failed messages back to ``pending`` (e.g. after fixing a webhook URL); their age for
    ``give_up_after`` restarts now. Returns how many were requeued."""
    sql = "UPDATE alert_outbox SET state = 'pending', next_attempt_at = ?, created_at = ?, last_error = 'requeued after: ' || coalesce(last_error, '') WHERE state = 'failed'"
    params: list[Any] = [now, now]
    if channel:
        sql += " AND channel = ?"
        params.append(channel)
    before = con.execute("SELECT count(*) FROM alert_outbox WHERE state = 'failed'").fetchone()[0]
    con.execute(sql, params)
    return before - con.execute("SELECT count(*) FROM alert_outbox WHERE state = 'failed'").fetchone()[0]
