"""Slack Block Kit payloads and the retry arithmetic (pure functions)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from reports import slack
from reports.http import RetryPolicy, post_with_retry, retry_after_seconds, HttpResponse
from tests.reports import fleet


def _texts(payload) -> list[str]:
    out = [payload["text"]]

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "text" and isinstance(v, str):
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(payload["blocks"])
    return out


def test_single_message_has_the_fields_people_need():
    gemm = fleet.regressions()[0]
    p = slack.build_blocks([gemm], "https://reports.example/r")
    text = "\n".join(_texts(p))
    for expected in ("HIGH regression: per-launch time of this kernel +20.0%", "*Job*\ntrain", "`void cutlass::Kernel&lt;cutlass_80_tensorop",
                     "*Per-launch time*\n+20.0% (420.0 → 504.0 µs), p=1.0e-09", "2026-11-01 20:00 UTC", "kernel slower same config", gemm.event_id):
        assert expected in text, expected
    assert p["blocks"][-1]["elements"][0]["url"] == "https://reports.example/r"
    assert len(json.dumps(p)) < 40_000 and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in p["blocks"])
    assert slack.build_blocks([gemm], None)["blocks"][-1]["type"] != "actions"


def test_hostile_names_are_escaped_everywhere_in_the_payload():
    evil = fleet.regressions()[1]
    evil = dataclasses.replace(evil, job="<!here> job & <@U123>")
    for payload in (slack.build_blocks([evil]), slack.build_blocks(fleet.regressions()[:1] + [evil])):
        for t in _texts(payload):
            assert "<!" not in t and "<@" not in t and "<script" not in t, t
    assert "&lt;!here&gt; job &amp; &lt;@U123&gt;" in json.dumps(slack.build_blocks([evil]))


def test_group_is_sorted_worst_first_and_capped():
    regs = [dataclasses.replace(fleet.regressions()[0], onset=fleet.START + dt.timedelta(hours=h), severity="low") for h in range(30)]
    regs.append(fleet.regressions()[2])  # critical
    p = slack.build_blocks(regs)
    sections = [b for b in p["blocks"] if b["type"] == "section"]
    assert len(sections) == slack.GROUP_LIST_MAX and "critical" in sections[0]["text"]["text"]
    assert "…and 16 more" in json.dumps(p, ensure_ascii=False) and len(p["blocks"]) <= 50


def test_infinite_magnitude_reads_as_new():
    r = dataclasses.replace(fleet.regressions()[0], before=0.0, magnitude_pct=float("inf"))
    assert "new (was 0)" in slack.build_blocks([r])["blocks"][0]["text"]["text"]


def test_retry_after_parsing():
    now = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.timezone.utc)
    assert retry_after_seconds("7", now) == 7.0
    assert retry_after_seconds("Mon, 02 Nov 2026 06:01:30 GMT", now) == 90.0
    assert retry_after_seconds("garbage", now) is None and retry_after_seconds(None, now) is None


def test_backoff_grows_and_is_capped():
    p = RetryPolicy(base_s=1, max_s=30)
    for attempt, cap in ((1, 1), (2, 2), (3, 4), (6, 30), (20, 30)):
        assert all(cap / 2 <= p.backoff(attempt) <= cap for _ in range(50))


class Scripted:
    def __init__(self, *responses):
        self.responses, self.calls = list(responses), 0

    def post(self, url, body, headers, timeout):
        self.calls += 1
        r = self.responses.pop(0)
        if isinstance(r, Exception):
            raise r
        return r


def test_post_with_retry_classifies_outcomes():
    fast = RetryPolicy(tries_per_run=3, base_s=0.001, max_s=0.002)
    ok = post_with_retry(Scripted(TimeoutError("slow"), HttpResponse(503), HttpResponse(200)), "u", b"", {}, fast, sleep=lambda s: None)
    assert ok.delivered and ok.attempts == 3
    bad = post_with_retry(Scripted(HttpResponse(400, body=b"invalid_payload")), "u", b"", {}, fast, sleep=lambda s: None)
    assert bad.permanent and bad.attempts == 1 and "invalid_payload" in bad.error
    down = post_with_retry(Scripted(*[HttpResponse(500)] * 3), "u", b"", {}, fast, sleep=lambda s: None)
    assert not down.delivered and not down.permanent and down.attempts == 3


def test_incident_message_lists_members_and_escapes_untrusted_text():
    from analytics.incidents import group_incidents
    from analytics.results import Finding

    base = fleet.regressions()[0]
    members = [dataclasses.replace(base, job="<!here> job & <@U123>", kernel=f"{fleet.EVIL}_{i}", kernel_id=f"k{i}",
                                   causes=(Finding("contention", 0.8, {"other_jobs_before": 0, "other_jobs_after": 1,
                                                                       "other_busy_share_before": 0.0, "other_busy_share_after": 0.2}),))
               for i in range(20)]
    [inc] = group_incidents(members)
    p = slack.build_incident(inc, "https://reports.example/r")
    assert p["blocks"][0]["text"]["text"] == "HIGH incident: contention · 20 regressions"
    for t in _texts(p):
        assert "<!" not in t and "<@" not in t and "<script" not in t, t
    dump = json.dumps(p, ensure_ascii=False)
    assert f"…and {20 - slack.GROUP_LIST_MAX} more in the report" in dump and inc.incident_id in dump
    assert len(p["blocks"]) <= 50 and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in p["blocks"])
    esc = slack.build_incident(inc, None, update="escalated", new_event_ids=[inc.members[3].event_id])
    assert esc["blocks"][0]["text"]["text"].startswith("Escalated to HIGH: incident: contention")
    assert sum("*new*" in t for t in _texts(esc)) == 1
    # a one-member incident reads as the regression itself, with the incident id
    [one] = group_incidents([base])
    single = slack.build_incident(one)
    assert single["blocks"][0]["text"]["text"].startswith("HIGH regression:") and f"incident `{one.incident_id}`" in json.dumps(single)
