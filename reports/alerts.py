"""Send what is new: regression events -> incidents -> outbox -> Slack and the generic webhook.

``send_new_alerts`` (what ``cudawatch alert`` and the hourly DAG call) groups the open regression
events into incidents (analytics.incidents) and queues one message per incident and channel
that the channel has not carried yet, then delivers every due outbox row with retries
(reports.http). See analytics.store.outbox for the delivery guarantees.

An incident keeps the id it was first alerted under (the outbox remembers which incident carried
each event; ``incidents.adopt_ids``). When a later hour adds members to an alerted incident:

* nothing is sent while the new members are no more severe than what the channel announced;
* one "escalated" message (id ``<incident id>-<severity>``, so at most one per severity level)
  when they raise the incident's severity above it.

Events the channel carried keep their incident for grouping after they resolve, so a late member
of a resolved incident joins it instead of alerting as new.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from analytics.incidents import Incident, adopt_ids, group_incidents
from analytics.results import SEVERITIES, Regression
from analytics.store.regressions import OPEN, load_regressions
from cudawatch.config import AlertConfig
from analytics.store import outbox
from reports import slack, webhook
from reports.http import HttpClient, RetryPolicy, UrllibClient, post_with_retry

#: how long an attempt in flight keeps its row from being retried (crash recovery delay)
LEASE = dt.timedelta(minutes=5)


@dataclass
class AlertResult:
    """What one run did: messages queued, sent, still pending (will be retried) and failed."""

    queued: int = 0
    sent: int = 0
    pending: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    channels: tuple[str, ...] = ()

    def summary(self) -> str:
        chans = ", ".join(self.channels) or "no channel configured"
        return f"alerts ({chans}): {self.queued} queued, {self.sent} sent, {self.pending} pending retry, {self.failed} failed"


def open_regressions(con) -> list[Regression]:
    """Open regression events (status new or ongoing) from the detector's table."""
    return list(load_regressions(con, statuses=OPEN))


def _carried_regressions(con, carried_ids: set[str], present: set[str], earliest: dt.datetime | None) -> list[Regression]:
    """Events a channel carried that are not open any more (resolved, went away), with onsets
    from a day before ``earliest``: grouping context, so a late member joins its old incident."""
    missing = carried_ids - present
    if not missing or earliest is None:
        return []
    since = earliest - dt.timedelta(days=1)  # an event is detected at or after its onset: detected_at bounds the load
    return [r for r in load_regressions(con, since=since) if r.event_id in missing and r.onset >= since]


def _rank(severity: str | None) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def plan_messages(regressions: Sequence[Regression], channel: str, carried: dict[str, tuple[str | None, str | None]],
                  context: Sequence[Regression] = ()) -> list[tuple[Incident, str, str, list[str]]]:
    """What to send on one channel: ``(incident, message id, update, new event ids)`` for every
    incident with open members the channel has not carried (see the module docstring).

    regressions: the open events; carried: ``outbox.carried(con, channel)``; context: carried
    events that are no longer open (they group, they are never announced)."""
    open_ids = {r.event_id for r in regressions}
    known = {eid: iid or eid for eid, (iid, _) in carried.items()}
    out = []
    for inc in adopt_ids(group_incidents([*regressions, *context]), known):
        new = [r for r in inc.members if r.event_id in open_ids and r.event_id not in carried]
        if not new:
            continue
        # what the channel announced: the message's severity; a v1 per-event row announced its event's
        told = [carried[r.event_id][1] or r.severity for r in inc.members if r.event_id in carried]
        if not told:
            out.append((inc, inc.incident_id, "new", [r.event_id for r in inc.members if r.event_id in open_ids]))
            continue
        announced = max(map(_rank, told))
        worst = max(new, key=lambda r: _rank(r.severity)).severity
        if _rank(worst) > announced:  # an escalation; less severe newcomers are absorbed silently
            out.append((inc, f"{inc.incident_id}-{worst}", "escalated", [r.event_id for r in new]))
    return out


def _messages(regressions: Sequence[Regression], config: AlertConfig, report_url: str | None, con, now: dt.datetime):
    out = []
    channels = [c for c, url in (("slack", config.slack_webhook_url), ("webhook", config.webhook_url)) if url]
    present = {r.event_id for r in regressions}
    earliest = min((r.onset for r in regressions), default=None)
    for channel in channels:
        carried = outbox.carried(con, channel)
        context = _carried_regressions(con, set(carried), present, earliest)
        for inc, mid, update, new_ids in plan_messages(regressions, channel, carried, context):
            if channel == "slack":
                body = slack.build_incident(inc, report_url, update=update, new_event_ids=new_ids)
            else:
                body = webhook.build_payload(inc, report_url, now, message_id=mid, update=update, new_event_ids=new_ids)
            severity = max((r.severity for r in inc.members if r.event_id in present), key=_rank)
            out.append((mid, channel, new_ids, body, inc.incident_id, severity))
    return out


def deliver_pending(
    con,
    config: AlertConfig,
    *,
    http: HttpClient | None = None,
    policy: RetryPolicy = RetryPolicy(),
    now: Callable[[], dt.datetime] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    result: AlertResult | None = None,
) -> AlertResult:
    """Deliver every due outbox row of the configured channels."""
    http = http or UrllibClient()
    clock = now or (lambda: dt.datetime.now(dt.timezone.utc))
    result = result or AlertResult()
    urls = {"slack": config.slack_webhook_url, "webhook": config.webhook_url}
    for row in outbox.due(con, clock()):
        url = urls.get(row.channel)
        if not url:
            continue  # channel switched off since queued: keep the row for when it is back
        if clock() - row.created_at > policy.give_up_after:
            outbox.mark_failed(con, row, f"gave up after {row.attempts} attempts over {policy.give_up_after}: {row.last_error}")
            result.failed += 1
            continue
        headers = webhook.headers_for(row.event_id) if row.channel == "webhook" else {"Content-Type": "application/json"}
        delivery = post_with_retry(
            http, url, row.payload.encode("utf-8"), headers, policy, prior_attempts=row.attempts, sleep=sleep, clock=clock,
            on_attempt=lambda row=row: outbox.record_attempt(con, row, clock() + LEASE, clock()),
        )
        if delivery.delivered:
            outbox.mark_sent(con, row, clock())
            result.sent += 1
        elif delivery.permanent:
            outbox.mark_failed(con, row, delivery.error)
            result.failed += 1
            result.errors.append(f"{row.channel} {row.event_id}: {delivery.error}")
        else:
            wait = max(delivery.retry_after_s or 0.0, policy.backoff(row.attempts + delivery.attempts))
            outbox.mark_retry(con, row, clock() + dt.timedelta(seconds=wait), delivery.error)
            result.pending += 1
            result.errors.append(f"{row.channel} {row.event_id}: {delivery.error} (retry after {wait:.0f} s)")
    return result


def send_new_alerts(
    con,
    config: AlertConfig,
    *,
    report_url: str | None = None,
    http: HttpClient | None = None,
    regressions: Sequence[Regression] | None = None,
    policy: RetryPolicy = RetryPolicy(),
    now: Callable[[], dt.datetime] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> AlertResult:
    """Queue one message per incident of the open regression events that a channel has not
    carried yet (or an escalation, see the module docstring), then deliver all due alerts.

    con: a writable warehouse connection (the outbox lives in it); config: channel URLs
    (``AlertConfig.from_env()``); report_url: the report link (default ``config.report_url``);
    http: the HTTP client (default urllib); regressions: the events (default: the detector's open
    events); now/sleep: clock and sleep, injectable for tests.
    """
    clock = now or (lambda: dt.datetime.now(dt.timezone.utc))
    outbox.ensure_outbox(con)
    result = AlertResult(channels=tuple(c for c, u in (("slack", config.slack_webhook_url), ("webhook", config.webhook_url)) if u))
    if regressions is None:
        regressions = open_regressions(con)
    regressions = [r for r in regressions if r.status in ("new", "ongoing")]
    result.queued = outbox.enqueue(con, _messages(regressions, config, report_url or config.report_url, con, clock()), clock())
    return deliver_pending(con, config, http=http, policy=policy, now=clock, sleep=sleep, result=result)


__all__ = ["AlertResult", "deliver_pending", "plan_messages", "send_new_alerts"]
