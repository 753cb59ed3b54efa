"""Regression events and their findings: the ``regressions`` and ``findings`` tables.

The detector (analytics.detect) decides what is an event; this module stores and loads them.
``regressions`` is keyed by ``Regression.event_id``, so re-running an hour changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json

from analytics.results import Finding, Regression
from analytics.store.tx import transaction

OPEN = ("new", "ongoing")

REGRESSIONS_DDL = """
CREATE TABLE IF NOT EXISTS regressions (
    event_id VARCHAR PRIMARY KEY,
    series VARCHAR NOT NULL,
    series_key VARCHAR NOT NULL,
    job VARCHAR,
    kernel VARCHAR,
    kernel_id VARCHAR,
    gpu_uuid VARCHAR,
    signature VARCHAR,
    onset TIMESTAMPTZ NOT NULL,        -- first hour of the new level
    before DOUBLE,
    after DOUBLE,
    magnitude_pct DOUBLE,
    p_value DOUBLE,
    severity VARCHAR,
    share_gpu_time DOUBLE,
    status VARCHAR NOT NULL,           -- new | ongoing | resolved | went_away
    detected_at TIMESTAMPTZ NOT NULL,  -- the as_of hour of the run that first reported it
    updated_at TIMESTAMPTZ NOT NULL,   -- the as_of hour of the last run that looked at it
    ended_at TIMESTAMPTZ               -- first hour back at the old level (resolved / went_away)
);
"""


FINDINGS_DDL = """
CREATE TABLE IF NOT EXISTS findings (
    event_id VARCHAR NOT NULL,     -- Regression.event_id
    rule VARCHAR NOT NULL,         -- a name from analytics.rules.RULES
    confidence DOUBLE NOT NULL,    -- 0..1; causes rank by it
    evidence VARCHAR,              -- JSON object: numbers before/after
    recommendation VARCHAR
)
"""


def ensure_tables(con) -> None:
    """Create ``regressions`` and ``findings`` if missing."""
    con.execute(REGRESSIONS_DDL)
    con.execute(FINDINGS_DDL)


def events_to_explain(con, as_of: dt.datetime) -> list[Regression]:
    """The events open as of ``as_of`` that no later run has looked at (``updated_at <= as_of``):
    the ones root cause explains for that hour, so re-running an older hour leaves the findings
    a later hour wrote alone."""
    if not has_table(con, "regressions"):
        return []
    ids = {r[0] for r in con.execute(
        "SELECT event_id FROM regressions WHERE detected_at <= ? AND updated_at <= ? AND status IN ('new', 'ongoing')",
        [as_of, as_of]).fetchall()}
    return [r for r in load_regressions(con, statuses=OPEN, as_of=as_of) if r.event_id in ids]


def reported_since(con, since: dt.datetime, as_of: dt.datetime) -> list[Regression]:
    """Events first reported by the runs of hours ``since``..``as_of`` (went-away blips excluded)."""
    return [r for r in load_regressions(con, since=since, as_of=as_of) if r.status != "went_away"]


def known_events(con, as_of, lookback_hours) -> list[dict]:
    """Open events, and closed ones with an onset in the window (so a recorded step is not re-raised)."""
    cur = con.execute(
        "SELECT * FROM regressions WHERE detected_at <= ? AND (status IN ('new', 'ongoing') OR onset > ?::TIMESTAMPTZ - to_hours(?))",
        [as_of, as_of, lookback_hours])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def gpu_time_shares(con, as_of) -> dict:
    """GPU-time share of each (job, kernel_id) in its job over the last 24 hours up to ``as_of``, and
    of each job's memory copies (key ("memcpy", job)) in its copy + kernel time."""
    rows = con.execute(
        """SELECT job, kernel_id, t / nullif(sum(t) OVER (PARTITION BY job), 0) FROM (
             SELECT job, kernel_id, sum(total_ns) AS t FROM kernel_hourly
             WHERE hour > ?::TIMESTAMPTZ - INTERVAL 24 HOUR AND hour <= ? GROUP BY job, kernel_id)""",
        [as_of, as_of]).fetchall()
    out = {(j, k): float(s or 0.0) for j, k, s in rows}
    copies = con.execute(
        """SELECT m.job, m.t / nullif(m.t + coalesce(k.t, 0), 0) FROM
             (SELECT job, sum(total_ns) AS t FROM memcpy_hourly WHERE hour > ?::TIMESTAMPTZ - INTERVAL 24 HOUR AND hour <= ? GROUP BY job) m
             LEFT JOIN (SELECT job, sum(total_ns) AS t FROM kernel_hourly WHERE hour > ?::TIMESTAMPTZ - INTERVAL 24 HOUR AND hour <= ?
                        GROUP BY job) k USING (job)""", [as_of, as_of, as_of, as_of]).fetchall()
    out.update({("memcpy", j): float(s or 0.0) for j, s in copies})
    return out


def gpu_top_jobs(con, as_of, hours) -> dict:
    """Job with the most GPU time on each GPU in the window (a GPU event is reported under it)."""
    rows = con.execute(
        """SELECT gpu_uuid, arg_max(job, t), list(DISTINCT job) FROM (
             SELECT gpu_uuid, job, sum(total_ns) AS t FROM kernels
             WHERE window_start > ?::TIMESTAMPTZ - to_hours(?) AND window_start < ?::TIMESTAMPTZ + INTERVAL 1 HOUR
             GROUP BY ALL) GROUP BY gpu_uuid""",
        [as_of, hours, as_of],
    ).fetchall()
    return {g: (top, set(jobs)) for g, top, jobs in rows}


def save_events(con, inserts: list[tuple[Regression, str, dt.datetime | None]], updates: list[tuple], as_of) -> None:
    """One transaction: ``updates`` ((event_id, status, after, magnitude_pct, p_value, ended_at))
    of known events, then ``inserts`` ((regression, series_key, ended_at)) of new ones (an event
    already stored is left as it is)."""
    with transaction(con):
        for event_id, status, after, mag, p, ended in updates:
            con.execute(
                "UPDATE regressions SET status = ?, after = ?, magnitude_pct = ?, p_value = ?, ended_at = ?, updated_at = ? WHERE event_id = ?",
                [status, after, mag, p, ended, as_of, event_id],
            )
        for r, series_key, ended_at in inserts:
            con.execute(
                """INSERT INTO regressions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (event_id) DO NOTHING""",
                [r.event_id, r.series, series_key, r.job, r.kernel, r.kernel_id, r.gpu_uuid, r.signature, r.onset,
                 r.before, r.after, r.magnitude_pct, r.p_value, r.severity, r.share_gpu_time, r.status, as_of, as_of, ended_at],
            )


def load_regressions(con, since: dt.datetime | None = None, until: dt.datetime | None = None, statuses=None,
                     *, as_of: dt.datetime | None = None) -> list[Regression]:
    """Regression objects from the ``regressions`` table, newest onset first.

    since/until: bounds on ``detected_at`` (the hour of the run that first reported the event),
    inclusive. statuses: e.g. ("new", "ongoing"); None for all. as_of: only events detected by then.
    Causes come from the ``findings`` table when it exists. Read-only: without a ``regressions``
    table (no detection run yet) the answer is [].
    """
    if not has_table(con, "regressions"):
        return []
    where, params = [], []
    if since is not None:
        where.append("detected_at >= ?")
        params.append(since)
    if until is not None:
        where.append("detected_at <= ?")
        params.append(until)
    if as_of is not None:
        where.append("detected_at <= ?")
        params.append(as_of)
    if statuses:
        statuses = [statuses] if isinstance(statuses, str) else list(statuses)
        where.append(f"status IN ({', '.join('?' for _ in statuses)})")
        params += statuses
    sql = "SELECT * FROM regressions" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY onset DESC, event_id"
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    causes = findings_of(con, [r["event_id"] for r in rows])
    labels = gpu_labels(con) if any(r["gpu_uuid"] for r in rows) else {}
    out = []
    for r in rows:
        out.append(Regression(
            job=r["job"], kernel=r["kernel"], kernel_id=r["kernel_id"], gpu_uuid=r["gpu_uuid"], series=r["series"],
            onset=r["onset"], before=r["before"], after=r["after"], magnitude_pct=r["magnitude_pct"], p_value=r["p_value"],
            severity=r["severity"], share_gpu_time=r["share_gpu_time"], signature=r["signature"], status=r["status"],
            detected_at=r["detected_at"], causes=causes.get(r["event_id"], ()),
            gpu_host=labels.get(r["gpu_uuid"], (None, None))[0], gpu_index=labels.get(r["gpu_uuid"], (None, None))[1],
        ))
    return out


def gpu_labels(con) -> dict[str, tuple[str, int]]:
    """(host, gpu_index) of every GPU UUID the agent has seen (the ``host:index`` label of a GPU)."""
    if not has_table(con, "device"):
        return {}
    rows = con.execute("SELECT gpu_uuid, any_value(host), any_value(gpu_index) FROM device GROUP BY gpu_uuid").fetchall()
    return {g: (h, int(i)) for g, h, i in rows if g is not None and h is not None and i is not None}


def has_table(con, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0])


def findings_of(con, event_ids) -> dict[str, tuple[Finding, ...]]:
    if not event_ids:
        return {}
    if not has_table(con, "findings"):
        return {}
    rows = con.execute(
        "SELECT event_id, rule, confidence, evidence, recommendation FROM findings WHERE event_id IN (SELECT unnest(?))",
        [list(event_ids)],
    ).fetchall()
    out: dict[str, list[Finding]] = {}
    for event_id, rule, conf, evidence, rec in rows:
        try:
            ev = json.loads(evidence) if isinstance(evidence, str) else (evidence or {})
        except ValueError:
            ev = {"raw": evidence}
        out.setdefault(event_id, []).append(Finding(rule=rule, confidence=float(conf or 0.0), evidence=ev, recommendation=rec or ""))
    return {k: tuple(sorted(v, key=lambda f: -f.confidence)) for k, v in out.items()}


def store_findings(con, regressions: list[Regression]) -> None:
    """Replace the ``findings`` rows of these events with their current causes, in one transaction."""
    if not regressions:
        return
    con.execute(FINDINGS_DDL)
    rows = [(r.event_id, f.rule, float(f.confidence), json.dumps(dict(f.evidence), default=str, sort_keys=True), f.recommendation)
            for r in regressions for f in r.causes]
    with transaction(con):
        con.execute("DELETE FROM findings WHERE event_id IN (SELECT unnest(?::VARCHAR[]))", [[r.event_id for r in regressions]])
        if rows:
            con.executemany("INSERT INTO findings VALUES (?, ?, ?, ?, ?)", rows)
