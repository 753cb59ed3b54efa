"""Slack incoming-webhook messages in Block Kit: one message per incident (``build_incident``):
a one-member incident reads as the regression itself, a larger one names its cause, severity and
place and lists its members worst first. ``build_blocks`` keeps the per-event and grouped forms.

Only the payload is built here (``build_blocks``); sending is reports.alerts (urllib, with
retries and the outbox) or, in a DAG, the Airflow Slack provider's webhook hook with the same
dict. Every untrusted string (job, kernel, GPU, evidence) goes through ``reports.escape.slack``,
so ``<!channel>``, ``<!here>`` and ``<@U123>`` cannot form; header blocks carry no untrusted text.
Limits respected (api.slack.com/reference/block-kit): header ≤ 150 chars, section text ≤ 3000,
≤ 10 fields of ≤ 2000, ≤ 50 blocks.
"""

from __future__ import annotations

from typing import Any, Sequence

from analytics.incidents import Incident
from analytics.results import Regression
from cudawatch.text import shorten_name
from reports.escape import single_line, slack, slack_code
from reports.evidence import sentence

SEVERITY_ICON = {"critical": ":red_circle:", "high": ":large_orange_circle:", "medium": ":large_yellow_circle:", "low": ":white_circle:"}
#: at most this many events listed in a grouped message (the rest are counted)
GROUP_LIST_MAX = 15


def magnitude(r: Regression) -> str:
    """``+12.3%``, or ``new (was 0)`` / ``gone (now 0)`` for changes from or to zero."""
    return r.change_label


def _subject(r: Regression) -> str:
    if r.kernel:  # the one shortening rule of cudawatch.text (head, tail and the kernel id)
        return slack_code(shorten_name(r.kernel, r.kernel_id))
    if r.gpu_uuid:
        label = r.gpu_label or r.gpu_uuid
        return "GPU " + slack_code(label, 80) + ("" if label == r.gpu_uuid else f" ({slack(r.gpu_uuid, 80)})")
    if r.series.startswith("memcpy_") and r.signature:
        return slack_code(r.signature, 80) + " copies"
    return "the whole job"


def _cause_line(r: Regression) -> str:
    top = r.top_cause
    if top is None:
        return "no root-cause rule matched"
    line = f"*{slack(top.rule.replace('_', ' '), 80)}* ({round(100 * top.confidence)}%)"
    if top.evidence:
        line += ": " + slack(sentence(top, r), 900)
    if top.recommendation:
        line += " — " + slack(top.recommendation, 400)
    return line


def _link_block(report_url: str | None) -> list[dict[str, Any]]:
    if not report_url:
        return []
    return [{"type": "actions", "elements": [
        {"type": "button", "text": {"type": "plain_text", "text": "Open report"}, "url": report_url[:3000], "action_id": "open_report"}]}]


def _single(r: Regression, report_url: str | None, context: str | None = None) -> dict[str, Any]:
    title = f"{r.severity.upper()} regression: {r.metric.name} {magnitude(r)}"
    fields = [
        f"*Severity*\n{SEVERITY_ICON.get(r.severity, '')} {slack(r.severity)}",
        f"*Job*\n{slack(r.job, 200)}",
        f"*{r.metric.label.capitalize()}*\n{magnitude(r)} ({r.size.values}), p={r.p_value:.1e}",
        f"*Onset*\n{r.onset:%Y-%m-%d %H:%M} UTC",
    ]
    if r.share_gpu_time and r.kernel:
        fields.append(f"*Kernel's share of job GPU time (24 h before detection)*\n{100 * r.share_gpu_time:.1f}%")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": single_line(title)[:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{'Kernel' if r.kernel else 'What'}*: {_subject(r)}"}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Top cause*: {_cause_line(r)}"[:3000]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context or f"event `{r.event_id}` · cudawatch"}]},
    ]
    text = f"{r.severity.upper()} regression in job {slack(r.job, 100)}: {r.metric.name} {magnitude(r)} since {r.onset:%Y-%m-%d %H:00} UTC"
    return {"text": text, "blocks": blocks + _link_block(report_url)}


def _member_line(r: Regression) -> str:
    return (f"{SEVERITY_ICON.get(r.severity, '')} *{slack(r.severity)}* {r.metric.name} *{magnitude(r)}* · job {slack(r.job, 80)}"
            f" · {_subject(r)} · since {r.onset:%m-%d %H:00} UTC")


def _place(inc: Incident) -> str:
    if inc.scope == "gpu":
        return "GPU " + slack_code(inc.place, 80)
    return "job " + slack_code(inc.place, 120)


def build_incident(inc: Incident, report_url: str | None = None, *, update: str = "new",
                   new_event_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """The incoming-webhook body for one incident (``update`` "new" or "escalated").

    One member: the single-regression message, with the incident id in its context line. More:
    a header with severity, cause and member count (no untrusted text), the place, jobs, onset and
    the top member's cause in words, then the members worst first (at most GROUP_LIST_MAX, the
    rest counted); an escalation marks the members that raised the severity."""
    ctx = f"incident `{inc.incident_id}` · event `{inc.top.event_id}` · cudawatch"
    if len(inc.members) == 1:
        msg = _single(inc.top, report_url, ctx)
        if update == "escalated":
            msg["blocks"][0]["text"]["text"] = single_line(f"Escalated: {msg['blocks'][0]['text']['text']}")[:150]
        return msg
    n = len(inc.members)
    cause = inc.cause_label
    prefix = f"Escalated to {inc.severity.upper()}: " if update == "escalated" else f"{inc.severity.upper()} "
    title = f"{prefix}incident: {cause} · {n} regressions"
    jobs = ", ".join(slack(j, 80) for j in inc.jobs[:5]) + (f" and {len(inc.jobs) - 5} more" if len(inc.jobs) > 5 else "")
    fresh = set(new_event_ids or ())
    fields = [f"*Severity*\n{SEVERITY_ICON.get(inc.severity, '')} {slack(inc.severity)}", f"*Where*\n{_place(inc)}",
              f"*Jobs*\n{jobs or '–'}", f"*Onset*\n{inc.onset:%Y-%m-%d %H:%M} UTC"]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": single_line(title)[:150], "emoji": True}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Top cause*: {_cause_line(inc.top)}"[:3000]}},
    ]
    for r in inc.members[:GROUP_LIST_MAX]:
        mark = " · *new*" if update == "escalated" and r.event_id in fresh else ""
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (_member_line(r) + mark)[:3000]}})
    if n > GROUP_LIST_MAX:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"…and {n - GROUP_LIST_MAX} more in the report"}]})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": ctx}]})
    text = f"{inc.severity.upper()} cudawatch incident ({slack(cause, 80)}): {n} regressions in {jobs or 'the fleet'} since {inc.onset:%Y-%m-%d %H:00} UTC"
    return {"text": text, "blocks": blocks + _link_block(report_url)}


def _group(regressions: Sequence[Regression], report_url: str | None) -> dict[str, Any]:
    n = len(regressions)
    worst = regressions[0].severity
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"{n} new regressions (worst: {worst})", "emoji": True}},
    ]
    for r in regressions[:GROUP_LIST_MAX]:
        line = f"{_member_line(r)}\n{_cause_line(r)}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": line[:3000]}})
    if n > GROUP_LIST_MAX:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"…and {n - GROUP_LIST_MAX} more in the report"}]})
    text = f"{n} new cudawatch regressions (worst: {worst})"
    return {"text": text, "blocks": blocks + _link_block(report_url)}


def build_blocks(regressions: Sequence[Regression], report_url: str | None = None) -> dict[str, Any]:
    """The incoming-webhook JSON body for one event (``[r]``) or a group of events.

    regressions: the events of one message, any order (a group is sorted worst first);
    report_url: link for the "Open report" button (omitted when None).
    """
    if not regressions:
        raise ValueError("build_blocks needs at least one regression")
    if len(regressions) == 1:
        return _single(regressions[0], report_url)
    rank = {"critical": 0, "high": 1, "medium": 2, "low": 3}
    ordered = sorted(regressions, key=lambda r: (rank.get(r.severity, 9), -abs(r.magnitude_pct), r.event_id))
    return _group(ordered, report_url)
