"""HTTP delivery with retries: an injectable client and exponential backoff honouring Retry-After.

``post_with_retry`` classifies each attempt: 2xx delivered; 429, 5xx, timeouts and connection
errors are retried after ``Retry-After`` (RFC 9110 §10.2.3, seconds or HTTP-date) or else capped
exponential backoff with full jitter (Brooker, "Exponential Backoff And Jitter", AWS Architecture
Blog 2015); any other status is permanent. When the wait would exceed what one run may spend, the
attempt is handed back to the outbox with the time it may be tried again.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class HttpClient(Protocol):
    """What alerts need from an HTTP library: one POST. Transport failures raise OSError
    (TimeoutError, ConnectionError, urllib.error.URLError are all OSError)."""

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> HttpResponse: ...


class UrllibClient:
    """The default client, stdlib only."""

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> HttpResponse:
        req = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (URL from config)
                return HttpResponse(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read(65536))
        except urllib.error.HTTPError as exc:
            return HttpResponse(exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, exc.read()[:65536] if exc.fp else b"")


@dataclass(frozen=True)
class RetryPolicy:
    """tries_per_run: attempts in one run before handing back to the outbox; base_s/max_s: the
    backoff range; max_wait_in_run_s: longest single wait inside a run (a longer Retry-After is
    deferred to a later run); timeout_s: per request; give_up_after: age after which a pending
    alert is marked failed (an endpoint down for an hour loses nothing)."""

    tries_per_run: int = 4
    base_s: float = 0.5
    max_s: float = 600.0
    max_wait_in_run_s: float = 10.0
    timeout_s: float = 10.0
    give_up_after: dt.timedelta = dt.timedelta(hours=48)

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full-jitter backoff before retry number ``attempt`` (1-based)."""
        cap = min(self.max_s, self.base_s * 2 ** max(attempt - 1, 0))
        return (rng or random).uniform(cap / 2, cap)


@dataclass
class Delivery:
    """Outcome of one ``post_with_retry`` call."""

    delivered: bool
    permanent: bool = False
    attempts: int = 0
    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None  # when not delivered and not permanent: wait at least this long


def retry_after_seconds(value: str | None, now: dt.datetime) -> float | None:
    """Parse a Retry-After header: delta-seconds or an HTTP-date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, (when - now).total_seconds())


def post_with_retry(
    client: HttpClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    policy: RetryPolicy,
    *,
    prior_attempts: int = 0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
    on_attempt: Callable[[], None] | None = None,
) -> Delivery:
    """POST ``body`` until delivered, permanently refused, or this run's tries are used up.

    prior_attempts: attempts made in earlier runs (continues the backoff); on_attempt: called
    before each request (the outbox records the attempt there first).
    """
    out = Delivery(delivered=False)
    for i in range(policy.tries_per_run):
        if on_attempt is not None:
            on_attempt()
        out.attempts += 1
        try:
            resp = client.post(url, body, headers, policy.timeout_s)
        except OSError as exc:
            out.status, out.error = None, f"{type(exc).__name__}: {exc}"
            wait = None
        else:
            out.status = resp.status
            if 200 <= resp.status < 300:
                out.delivered, out.error = True, None
                return out
            detail = resp.body[:200].decode("utf-8", "replace")
            out.error = f"HTTP {resp.status}: {detail}".strip()
            if resp.status != 429 and not 500 <= resp.status < 600:
                out.permanent = True
                return out
            wait = retry_after_seconds(resp.headers.get("retry-after"), clock())
        if wait is None:
            wait = policy.backoff(prior_attempts + i + 1)
        out.retry_after_s = wait
        if i + 1 == policy.tries_per_run or wait > policy.max_wait_in_run_s:
            return out
        sleep(wait)
    return out
