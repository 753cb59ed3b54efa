"""Alert delivery against a real HTTP server on loopback and a real DuckDB outbox."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from cudawatch.config import AlertConfig
from analytics.store import outbox
from reports.alerts import send_new_alerts
from reports.http import RetryPolicy
from tests.reports import fleet

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.timezone.utc)
FAST = RetryPolicy(tries_per_run=3, base_s=0.01, max_s=0.05, max_wait_in_run_s=2.0, timeout_s=2.0)


class Clock:
    def __init__(self, t=T0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def con(tmp_path):
    c = duckdb.connect(str(tmp_path / "w.duckdb"))
    yield c
    c.close()


def _config(rec, slack=True, hook=True):
    return AlertConfig(slack_webhook_url=rec.url + "/slack" if slack else None,
                       webhook_url=rec.url + "/webhook" if hook else None, report_url="https://reports.example/2026-11-02")


def test_each_new_event_goes_out_once_per_channel(con, receiver, fleet_regressions):
    sleeps = []
    res = send_new_alerts(con, _config(receiver), regressions=fleet_regressions, policy=FAST, now=Clock(), sleep=sleeps.append)
    assert (res.queued, res.sent, res.pending, res.failed) == (6, 6, 0, 0)
    assert len(receiver.on("/slack")) == 3 and len(receiver.on("/webhook")) == 3
    keys = sorted(r.headers["idempotency-key"] for r in receiver.on("/webhook"))
    assert keys == sorted(r.event_id for r in fleet_regressions)
    body = receiver.on("/webhook")[0].json
    assert body["schema"] == "cudawatch.alert.v2" and body["idempotency_key"] == receiver.on("/webhook")[0].headers["idempotency-key"]
    assert body["report_url"] == "https://reports.example/2026-11-02"
    # v1's fields keep their meaning (the incident's top member); the incident comes with them
    assert body["event_id"] == body["regression"]["event_id"] == body["incident"]["incident_id"]
    assert body["incident"]["member_count"] == 1 and body["incident"]["update"] == "new"
    # a second run (next hour) finds nothing new and sends nothing
    again = send_new_alerts(con, _config(receiver), regressions=fleet_regressions, policy=FAST, now=Clock(T0 + dt.timedelta(hours=1)))
    assert (again.queued, again.sent) == (0, 0)
    assert len(receiver.requests) == 6
    assert {r.state for r in outbox.rows(con)} == {"sent"} and sleeps == []


def _contention(n: int, hour: int = 0, severity: str = "low", first: int = 0):
    """``n`` kernels of one job slowed by contention, onsets within 2 h (one incident)."""
    from analytics.results import Finding, Regression

    onset = fleet.START + dt.timedelta(hours=20 + hour)
    return [Regression(job="serve", kernel=f"kernel_{i}<{fleet.EVIL}>", kernel_id=f"k{i:04d}", gpu_uuid=None, series="kernel_mean_ns",
                       onset=onset + dt.timedelta(hours=i % 2), before=100.0, after=120.0, magnitude_pct=20.0, p_value=1e-9,
                       severity=severity, share_gpu_time=0.02, status="new",
                       causes=(Finding("contention", 0.8, {"other_jobs_before": 0, "other_jobs_after": 1,
                                                           "other_busy_share_before": 0.0, "other_busy_share_after": 0.2}),))
            for i in range(first, first + n)]


def test_one_incident_is_one_message_per_channel(con, receiver):
    regs = _contention(36)
    res = send_new_alerts(con, _config(receiver), regressions=regs, policy=FAST, now=Clock())
    assert (res.queued, res.sent) == (2, 2)
    [msg] = receiver.on("/slack")
    header = msg.json["blocks"][0]["text"]["text"]
    assert header == "LOW incident: contention · 36 regressions"
    assert "…and 21 more in the report" in json.dumps(msg.json, ensure_ascii=False) and len(msg.json["blocks"]) <= 50
    [hook] = receiver.on("/webhook")
    inc = hook.json["incident"]
    assert inc["member_count"] == 36 and inc["cause"] == "contention" and sorted(inc["new_event_ids"]) == sorted(r.event_id for r in regs)
    assert hook.headers["idempotency-key"] == inc["incident_id"] == hook.json["idempotency_key"]
    assert hook.json["regression"]["event_id"] == hook.json["event_id"] == inc["members"][0]["event_id"]
    assert "<!channel>" not in msg.body.decode() and fleet.EVIL in hook.body.decode().replace("\\u003c", "<")
    [srow] = outbox.rows(con, "sent")[:1]
    assert sorted(srow.event_ids) == sorted(r.event_id for r in regs)


def test_incident_gaining_members_later_sends_nothing_unless_it_escalates(con, receiver):
    first = _contention(6)
    send_new_alerts(con, _config(receiver), regressions=first, policy=FAST, now=Clock())
    assert len(receiver.requests) == 2
    iid = receiver.on("/webhook")[0].json["incident"]["incident_id"]
    # next hour: two more kernels of the same incident, no more severe -> nothing new is sent
    grown = first + _contention(2, first=6)
    res = send_new_alerts(con, _config(receiver), regressions=grown, policy=FAST, now=Clock(T0 + dt.timedelta(hours=1)))
    assert (res.queued, res.sent) == (0, 0) and len(receiver.requests) == 2
    # the first members resolved (no longer open; still in the detector's table); a late member
    # still joins the old incident
    from analytics.store import regressions as events

    events.ensure_tables(con)
    resolved = [dataclasses.replace(r, status="resolved") for r in grown]
    events.save_events(con, [(r, r.event_id, None) for r in resolved], [], T0)
    events.store_findings(con, resolved)
    res = send_new_alerts(con, _config(receiver), regressions=_contention(1, first=8), policy=FAST, now=Clock(T0 + dt.timedelta(hours=2)))
    assert (res.queued, res.sent) == (0, 0), "a late member of a resolved incident is not a new incident"
    # a high member raises the incident: one escalation per channel, under the same incident id
    worse = grown + _contention(1, severity="high", first=9)
    res = send_new_alerts(con, _config(receiver), regressions=worse, policy=FAST, now=Clock(T0 + dt.timedelta(hours=3)))
    assert (res.queued, res.sent) == (2, 2)
    esc = receiver.on("/webhook")[-1]
    assert esc.json["incident"]["incident_id"] == iid and esc.json["incident"]["update"] == "escalated"
    assert esc.headers["idempotency-key"] == f"{iid}-high" and esc.json["incident"]["severity"] == "high"
    assert len(esc.json["incident"]["new_event_ids"]) == 3  # the silent newcomers and the high one
    assert receiver.on("/slack")[-1].json["blocks"][0]["text"]["text"].startswith("Escalated to HIGH: incident: contention")
    # re-running that hour sends nothing again
    res = send_new_alerts(con, _config(receiver), regressions=worse, policy=FAST, now=Clock(T0 + dt.timedelta(hours=4)))
    assert (res.queued, res.sent) == (0, 0) and len(receiver.requests) == 4


def test_v1_outbox_rows_are_read_and_not_resent(con, receiver, fleet_regressions):
    """A warehouse whose outbox was written per event (v1 table, no incident columns)."""
    con.execute("""CREATE TABLE alert_outbox (event_id VARCHAR NOT NULL, channel VARCHAR NOT NULL, event_ids VARCHAR[] NOT NULL,
        payload VARCHAR NOT NULL, state VARCHAR NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at TIMESTAMPTZ NOT NULL, last_error VARCHAR, created_at TIMESTAMPTZ NOT NULL, sent_at TIMESTAMPTZ,
        PRIMARY KEY (event_id, channel))""")
    gemm = fleet_regressions[0]
    con.execute("INSERT INTO alert_outbox (event_id, channel, event_ids, payload, state, next_attempt_at, created_at) "
                "VALUES (?, 'webhook', [?], '{}', 'sent', ?, ?)", [gemm.event_id, gemm.event_id, T0, T0])
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions, policy=FAST, now=Clock())
    assert (res.queued, res.sent) == (2, 2)
    assert gemm.event_id not in {r.headers["idempotency-key"] for r in receiver.on("/webhook")}


def test_retry_on_500_then_delivered(con, receiver, fleet_regressions):
    receiver.respond("/webhook", (500, {}, 0), (502, {}, 0))
    sleeps = []
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=FAST, now=Clock(), sleep=sleeps.append)
    assert res.sent == 1
    assert [r.headers["idempotency-key"] for r in receiver.on("/webhook")] == [fleet_regressions[0].event_id] * 3
    assert len(sleeps) == 2 and all(0 < s <= FAST.max_s for s in sleeps)
    [row] = outbox.rows(con)
    assert row.state == "sent" and row.attempts == 3 and row.last_error is None


def test_429_retry_after_is_honoured(con, receiver, fleet_regressions):
    receiver.respond("/slack", (429, {"Retry-After": "1"}, 0))
    sleeps = []
    res = send_new_alerts(con, _config(receiver, hook=False), regressions=fleet_regressions[:1], policy=FAST, now=Clock(), sleep=sleeps.append)
    assert res.sent == 1 and sleeps == [1.0] and len(receiver.on("/slack")) == 2


def test_long_retry_after_defers_to_a_later_run(con, receiver, fleet_regressions):
    receiver.respond("/slack", (429, {"Retry-After": "120"}, 0))
    clock, sleeps = Clock(), []
    res = send_new_alerts(con, _config(receiver, hook=False), regressions=fleet_regressions[:1], policy=FAST, now=clock, sleep=sleeps.append)
    assert (res.sent, res.pending) == (0, 1) and sleeps == []
    [row] = outbox.rows(con)
    assert row.state == "pending" and row.next_attempt_at >= T0 + dt.timedelta(seconds=120) and "429" in row.last_error
    clock.t = T0 + dt.timedelta(seconds=60)  # too early: not due, nothing sent
    assert send_new_alerts(con, _config(receiver, hook=False), regressions=fleet_regressions[:1], policy=FAST, now=clock).sent == 0
    assert len(receiver.on("/slack")) == 1
    clock.t = T0 + dt.timedelta(minutes=30)
    assert send_new_alerts(con, _config(receiver, hook=False), regressions=fleet_regressions[:1], policy=FAST, now=clock).sent == 1


def test_endpoint_down_for_an_hour_loses_nothing(con, receiver, fleet_regressions):
    receiver.respond("/webhook", *[(503, {}, 0)] * 9)  # three runs' worth of failures
    clock = Clock()
    for minutes in (0, 20, 40):
        clock.t = T0 + dt.timedelta(minutes=minutes)
        res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=FAST, now=clock, sleep=lambda s: None)
        assert res.sent == 0 and res.pending == 1 and res.failed == 0
    clock.t = T0 + dt.timedelta(minutes=65)
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=FAST, now=clock, sleep=lambda s: None)
    assert res.sent == 1
    assert len(receiver.unique) == 1 and len(receiver.on("/webhook")) == 10
    [row] = outbox.rows(con)
    assert row.state == "sent" and row.attempts == 10


def test_timeout_is_retried(con, receiver, fleet_regressions):
    receiver.respond("/webhook", (200, {}, 1.5))  # slower than the client's timeout
    policy = dataclasses.replace(FAST, timeout_s=0.3)
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=policy, now=Clock(), sleep=lambda s: None)
    assert res.sent == 1 and len(receiver.on("/webhook")) == 2
    assert len(receiver.unique) == 1  # the receiver saw the key twice and kept one


def test_permanent_error_marks_failed_and_old_pending_gives_up(con, receiver, fleet_regressions):
    receiver.respond("/slack", (404, {}, 0))
    res = send_new_alerts(con, _config(receiver, hook=False), regressions=fleet_regressions[:1], policy=FAST, now=Clock())
    assert res.failed == 1 and len(receiver.on("/slack")) == 1
    assert outbox.rows(con)[0].state == "failed" and "404" in outbox.rows(con)[0].last_error
    receiver.respond("/webhook", *[(503, {}, 0)] * 3)
    send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=FAST, now=Clock(), sleep=lambda s: None)
    late = Clock(T0 + FAST.give_up_after + dt.timedelta(hours=1))
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=fleet_regressions[:1], policy=FAST, now=late)
    assert res.failed == 1 and outbox.rows(con, "pending") == []


CRASH_SCRIPT = textwrap.dedent("""
    import datetime as dt, os, sys
    import duckdb
    from cudawatch.config import AlertConfig
    from reports.alerts import send_new_alerts
    from reports.http import RetryPolicy, UrllibClient
    from tests.reports import fleet

    class DiesAfterDelivery(UrllibClient):
        # the endpoint has accepted the alert; the process dies before the outbox records it
        def post(self, url, body, headers, timeout):
            resp = super().post(url, body, headers, timeout)
            if resp.status == 200:
                os._exit(17)
            return resp

    con = duckdb.connect(sys.argv[1])
    cfg = AlertConfig(webhook_url=sys.argv[2] + "/webhook")
    send_new_alerts(con, cfg, regressions=fleet.regressions()[:2], http=DiesAfterDelivery(),
                    policy=RetryPolicy(tries_per_run=1), now=lambda: dt.datetime(2026, 11, 2, 6, tzinfo=dt.timezone.utc))
    print("not reached")
""")


def test_crash_between_send_and_record_is_deduplicated_by_idempotency_key(tmp_path, receiver):
    db = tmp_path / "crash.duckdb"
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(db), receiver.url], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 17, proc.stderr
    assert len(receiver.on("/webhook")) == 1  # delivered, then the process died
    con = duckdb.connect(str(db))
    try:
        rows = {r.event_id: r for r in outbox.rows(con)}
        assert len(rows) == 2 and all(r.state == "pending" for r in rows.values())  # queued before sending: nothing lost
        first = receiver.on("/webhook")[0].headers["idempotency-key"]
        assert rows[first].attempts == 1 and rows[first].last_error.startswith("in flight")
        # the next run (after the in-flight lease) sends both; the crashed one is sent again with the same key
        res = send_new_alerts(con, AlertConfig(webhook_url=receiver.url + "/webhook"), regressions=fleet.regressions()[:2],
                              policy=FAST, now=Clock(T0 + dt.timedelta(minutes=10)))
        assert (res.queued, res.sent) == (0, 2)
        keys = [r.headers["idempotency-key"] for r in receiver.on("/webhook")]
        assert sorted(keys) == sorted([first, first, *(k for k in rows if k != first)])
        bodies = [r.body for r in receiver.on("/webhook") if r.headers["idempotency-key"] == first]
        assert bodies[0] == bodies[1]  # same bytes on retry
        assert sorted(receiver.unique) == sorted(rows)  # the receiver applied each event exactly once
        assert {r.state for r in outbox.rows(con)} == {"sent"}
    finally:
        con.close()


def test_hostile_kernel_name_cannot_mention_or_inject_in_slack(con, receiver, fleet_regressions):
    evil = [r for r in fleet_regressions if r.kernel == fleet.EVIL]
    send_new_alerts(con, _config(receiver), regressions=evil, policy=FAST, now=Clock())
    [msg] = receiver.on("/slack")
    raw = msg.body.decode()
    texts = json.dumps(msg.json)
    for bad in ("<!channel>", "<script>", "<@", "<!here>"):
        assert bad not in raw and bad not in texts
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;!channel&gt;" in texts
    # the webhook carries the raw name as JSON data (receivers must escape when rendering)
    assert receiver.on("/webhook")[0].json["regression"]["kernel"] == fleet.EVIL


def test_a_v1_alerted_event_gaining_a_no_more_severe_member_sends_nothing(con, receiver):
    """A v1 row announced its one event at that event's severity: a later member of the same
    incident, no more severe, is absorbed silently, as for a v2 row (no false 'escalated')."""
    old, late = _contention(2)
    outbox.ensure_outbox(con)
    con.execute("INSERT INTO alert_outbox (event_id, channel, event_ids, payload, state, next_attempt_at, created_at) "
                "VALUES (?, 'webhook', [?], '{}', 'sent', ?, ?)", [old.event_id, old.event_id, T0, T0])
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=[old, late], policy=FAST, now=Clock())
    assert (res.queued, res.sent) == (0, 0), [r.json["incident"]["update"] for r in receiver.on("/webhook")]
    worse = _contention(1, severity="high", first=5)
    res = send_new_alerts(con, _config(receiver, slack=False), regressions=[old, late, *worse], policy=FAST, now=Clock())
    assert (res.queued, res.sent) == (1, 1) and receiver.on("/webhook")[-1].json["incident"]["update"] == "escalated"


def test_incident_ids_for_the_views_read_v1_rows_and_no_outbox(con):
    assert outbox.incident_ids(con) == {}
    con.execute("""CREATE TABLE alert_outbox (event_id VARCHAR NOT NULL, channel VARCHAR NOT NULL, event_ids VARCHAR[] NOT NULL,
        payload VARCHAR NOT NULL, state VARCHAR NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at TIMESTAMPTZ NOT NULL, last_error VARCHAR, created_at TIMESTAMPTZ NOT NULL, sent_at TIMESTAMPTZ,
        PRIMARY KEY (event_id, channel))""")
    con.execute("INSERT INTO alert_outbox (event_id, channel, event_ids, payload, next_attempt_at, created_at) "
                "VALUES ('group-1', 'slack', ['e1', 'e2'], '{}', ?, ?)", [T0, T0])
    assert outbox.incident_ids(con) == {"e1": "e1", "e2": "e2"}  # v1: each event was its own alert's key
    outbox.ensure_outbox(con)
    outbox.enqueue(con, [("inc-b", "webhook", ["e2", "e3"], {}, "inc-b", "low")], T0 + dt.timedelta(hours=1))
    assert outbox.incident_ids(con) == {"e1": "e1", "e2": "e2", "e3": "inc-b"}  # the first alert's id wins
