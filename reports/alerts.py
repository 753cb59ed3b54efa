"""Send what is new: regression events -> outbox -> Slack and the generic webhook.

``send_new_alerts`` (what ``cudawatch alert`` and the hourly DAG call) queues every open
regression event that a configured channel has not carried yet, then delivers every due outbox
row with retries (reports.http). See analytics.store.outbox for the delivery guarantees.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from analytics.results import Regression
from analytics.store.regressions import OPEN, load_regressions
from cudawatch.config import AlertConfig
from analytics.store import outbox
from reports import slack, webhook
from reports.http import HttpClient, RetryPolicy, UrllibClient, post_with_retry

#: more new events than this in one run go to Slack as one grouped message
GROUP_THRESHOLD = 3
#: a grouped Slack message carries at most this many events
GROUP_MAX = 20
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


def _messages(regressions: Sequence[Regression], config: AlertConfig, report_url: str | None, con, now: dt.datetime):
    out = []
    if config.slack_webhook_url:
        done = outbox.queued_event_ids(con, "slack")
        new = [r for r in regressions if r.event_id not in done]
        if len(new) > GROUP_THRESHOLD:
            for i in range(0, len(new), GROUP_MAX):
                chunk = new[i:i + GROUP_MAX]
                ids = sorted(r.event_id for r in chunk)
                mid = "group-" + hashlib.sha1("|".join(ids).encode()).hexdigest()[:16]
                out.append((mid, "slack", ids, slack.build_blocks(chunk, report_url)))
        else:
            out += [(r.event_id, "slack", [r.event_id], slack.build_blocks([r], report_url)) for r in new]
    if config.webhook_url:
        done = outbox.queued_event_ids(con, "webhook")
        out += [(r.event_id, "webhook", [r.event_id], webhook.build_payload(r, report_url, now))
                for r in regressions if r.event_id not in done]
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
    """Queue the open regression events no channel has carried yet, then deliver all due alerts.

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


__all__ = ["AlertResult", "GROUP_THRESHOLD", "deliver_pending", "send_new_alerts"]
