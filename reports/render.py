"""The daily report and the regression detail page: warehouse + regressions -> HTML and text.

``build_report`` gathers every section (analytics.store.report), draws the charts (reports.charts) and
renders the jinja2 templates in ``reports/templates`` with autoescape on, so kernel, job and host
names (untrusted: they come from user programs) are escaped in HTML; the plain-text version passes
every value through ``reports.escape.plain``. Charts are PNG: ``data:`` URIs in the HTML file, or
``cid:`` references plus the image bytes for a multipart e-mail (reports.email).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from analytics.results import SEVERITIES, Finding, Regression
from analytics.store import chart_series, outbox
from analytics.store import report as data
from reports import charts, jinja
from reports.incident_view import ReportIncident, incident_order
from reports.email import cid_of
from reports.escape import header, truncate_middle
from cudawatch.config import max_overhead_pct
from cudawatch.shards import atomic_file
from cudawatch.text import shorten_name

#: at most this many per-regression charts in one report (the rest are listed without a chart)
MAX_CHARTS = 20
#: hours of history before the onset that a regression chart shows
CHART_HISTORY_H = 36

from reports.jinja import STATUS_ORDER  # noqa: E402 (re-exported)


class ReportError(ValueError):
    """The report cannot be made (no data, bad date); the message says why."""


@dataclass
class RenderedReport:
    """One rendered report: HTML, plain text, the chart images by content id, and detail pages."""

    day: dt.date
    html: str
    text: str
    subject: str
    images: dict[str, bytes] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # event_id -> detail page HTML
    mail_html: str = ""  # the same report with ``cid:`` images, for the multipart e-mail


@dataclass
class ReportItem:
    """A regression as the report shows it (status relative to the report day, chart, series)."""

    r: Regression
    status: str
    chart: str | None = None  # image name
    points: int = 0
    band: tuple[float, float] | None = None
    unit: str = ""
    scale: float = 1.0
    href: str | None = None

    @property
    def title(self) -> str:
        r = self.r
        if r.kernel:  # the one shortening rule of cudawatch.text (head, tail and the kernel id)
            return shorten_name(r.kernel, r.kernel_id)
        if r.gpu_uuid:
            what = f"GPU {r.gpu_label}"
        elif r.series.startswith("memcpy_") and r.signature:
            what = f"{r.signature} copies"
        else:
            what = r.job
        return truncate_middle(what, 90)

    @property
    def causes(self) -> list[Finding]:
        return sorted(self.r.causes, key=lambda f: -f.confidence)


# --- regressions --------------------------------------------------------------------------------

def load_report_regressions(con, end: dt.datetime) -> list[Regression]:
    """Regressions known up to ``end`` from the detector's table (``analytics.store.regressions.load_regressions``,
    which returns an empty list while the warehouse has no regressions table yet)."""
    from analytics.store.regressions import load_regressions

    return list(load_regressions(con, until=end))


def classify(regressions: Iterable[Regression], start: dt.datetime, end: dt.datetime) -> list[tuple[str, Regression]]:
    """Status of each regression relative to the report day: ``new`` (onset or detection in the
    day, so an event found hours after a late-evening onset is still new once), ``ongoing``
    (earlier onset and detection, still open), ``resolved`` (resolved or went away). Regressions
    with an onset after the day are left out. Sorted by status, severity (worst first), magnitude."""
    out = []
    for r in regressions:
        onset = r.onset if r.onset.tzinfo else r.onset.replace(tzinfo=dt.timezone.utc)
        if onset >= end:
            continue
        detected = r.detected_at
        if detected is not None and detected.tzinfo is None:
            detected = detected.replace(tzinfo=dt.timezone.utc)
        if r.status in ("resolved", "went_away"):
            status = "resolved"
        elif start <= (detected or onset) < end or onset >= start:
            status = "new"
        else:
            status = "ongoing"
        out.append((status, r))
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda sr: (STATUS_ORDER.index(sr[0]), -rank.get(sr[1].severity, -1), -abs(sr[1].magnitude_pct), sr[1].event_id))
    return out


def _band(points: list[tuple[dt.datetime, float]], onset: dt.datetime) -> tuple[float, float] | None:
    """Baseline band: median ± 3 robust σ (1.4826·MAD) of the 24 h before the change point
    (Rousseeuw & Croux 1993, doi:10.1080/01621459.1993.10476408)."""
    pre = [v for t, v in points if onset - dt.timedelta(hours=24) <= t < onset]
    if len(pre) < 3:
        return None
    med = statistics.median(pre)
    mad = statistics.median(abs(v - med) for v in pre) * 1.4826
    return med - 3 * mad, med + 3 * mad


# --- building -----------------------------------------------------------------------------------

def _archive_href(report_url: str | None) -> Callable[[Regression], str] | None:
    """Links to the detail pages beside an archived report at ``report_url`` (write_report)."""
    if not (report_url and report_url.endswith(".html")):
        return None
    base, _, page = report_url.rpartition("/")
    stem = page[: -len(".html")]
    return lambda r: f"{base}/{stem}-{r.event_id}.html"


def build_report(
    con,
    day: dt.date,
    *,
    regressions: list[Regression] | None = None,
    image_mode: str = "data",
    detail_href: Callable[[Regression], str | None] | None = None,
    report_url: str | None = None,
    report_href: str | None = None,
    max_charts: int = MAX_CHARTS,
) -> RenderedReport:
    """Render the daily report for UTC ``day``.

    regressions: the events to show (default: ``load_report_regressions``); image_mode: ``data``
    (self-contained HTML file) or ``cid`` (for a multipart e-mail; the bytes are in ``images``);
    detail_href: link of each regression's detail page (None: no link); report_url: where the
    archived report lives (shown in the plain-text version).
    """
    if image_mode not in ("data", "cid"):
        raise ValueError(f"image_mode must be 'data' or 'cid', not {image_mode!r}")
    start, end = data.day_window(day)
    first, last = data.data_extent(con)
    if regressions is None:
        regressions = load_report_regressions(con, end)
    mail_href = _archive_href(report_url)
    if detail_href is None:
        detail_href = mail_href
    images: dict[str, bytes] = {}

    def img(name: str) -> str:
        if image_mode == "cid":
            return f"cid:{cid_of(name)}"
        return "data:image/png;base64," + base64.b64encode(images[name]).decode()

    summary = data.fleet_summary(con, start, end)
    kernels = data.top_kernels(con, start, end, 10)
    images["top-kernels"] = charts.top_kernels_chart(kernels)
    grid = data.utilisation_grid(con, start, end)
    images["utilisation"] = charts.utilisation_heatmap(grid.gpus, grid.hours, grid.values)

    items = []
    incidents = []
    chart_end = min(end, last + dt.timedelta(hours=1)) if last else end
    ordered = []
    for number, (inc, inc_status, members) in enumerate(incident_order(classify(regressions, start, end), outbox.incident_ids(con)), 1):
        incidents.append(ReportIncident(inc, inc_status, number=number))
        ordered += [(incidents[-1], st, r) for st, r in members]
    for n, (rinc, status, r) in enumerate(ordered):
        unit, scale = charts.unit_of(r.series)
        item = ReportItem(r=r, status=status, unit=unit, scale=scale, href=detail_href(r) if detail_href else None)
        rinc.items.append(item)
        if n < max_charts:
            onset = r.onset if r.onset.tzinfo else r.onset.replace(tzinfo=dt.timezone.utc)
            points = chart_series.regression_series(con, r, onset - dt.timedelta(hours=CHART_HISTORY_H), chart_end)
            item.points = len(points)
            item.band = _band(points, onset)
            name = f"regression-{r.event_id}"
            images[name] = charts.regression_chart(points, onset, r.before, r.after, r.series, band=item.band)
            item.chart = name
        items.append(item)

    counts = {sev: {st: 0 for st in STATUS_ORDER} for sev in SEVERITIES}
    for item in items:
        counts.setdefault(item.r.severity, {st: 0 for st in STATUS_ORDER})[item.status] += 1
    totals = {st: sum(c[st] for c in counts.values()) for st in STATUS_ORDER}
    gaps = data.data_gaps(con, start, end, last)
    budget_pct = max_overhead_pct()
    ctx = dict(
        day=day, start=start, end=end, first=first, last=last, generated=dt.datetime.now(dt.timezone.utc),
        summary=summary, kernels=kernels, jobs=data.job_table(con, start, end), items=items, counts=counts,
        totals=totals, incidents=incidents, gpus=data.gpu_health(con, start, end),
        collector=data.collector_health(con, start, end, budget_pct), budget_pct=budget_pct, gaps=gaps, img=img, report_url=report_url, grid=grid,
        gpu_labels=_gpu_labels(con),
    )
    worst = next((s for s in SEVERITIES[::-1] if any(counts[s][st] for st in ("new", "ongoing"))), None)
    open_incidents = sum(1 for x in incidents if x.status != "resolved")
    subject = header(
        f"cudawatch {day:%Y-%m-%d}: {totals['new']} new, {totals['ongoing']} ongoing regressions"
        + (f" in {open_incidents} incident{'s' if open_incidents != 1 else ''}" if open_incidents and open_incidents < totals["new"] + totals["ongoing"] else "")
        + (f" (worst: {worst})" if worst else "")
    )
    html = jinja.env().get_template("report.html").render(subject=subject, **ctx)
    # The e-mail: the same content with cid: images and links into the archive (report_url).
    mail_incidents = [dataclasses.replace(x, items=[dataclasses.replace(i, href=mail_href(i.r) if mail_href else None) for i in x.items])
                      for x in incidents]
    mail_ctx = {**ctx, "img": lambda name: f"cid:{cid_of(name)}", "incidents": mail_incidents,
                "items": [i for x in mail_incidents for i in x.items]}
    mail_html = jinja.env().get_template("report.html").render(subject=subject, **mail_ctx)
    text = jinja.env(text=True).get_template("report.txt").render(subject=subject, **mail_ctx)
    details = {}
    if detail_href is not None and image_mode == "data":
        for item in items:
            details[item.r.event_id] = render_detail(con, item, day, report_href=report_href)
    return RenderedReport(day=day, html=html, text=text, subject=subject, images=images, details=details, mail_html=mail_html)


def _gpu_labels(con) -> dict[str, str]:
    """``host:index`` of every GPU UUID seen (the one GPU label of the report; the UUID is on hover)."""
    from analytics.store.regressions import gpu_labels

    return {g: f"{h}:{i}" for g, (h, i) in gpu_labels(con).items()}


def render_detail(con, item: ReportItem, day: dt.date, *, report_href: str | None = None) -> str:
    """The detail page of one regression: full names, the series chart over the whole data range,
    segment statistics, every cause with all its evidence, and SQL to look at the series."""
    r = item.r
    first, last = data.data_extent(con)
    onset = r.onset if r.onset.tzinfo else r.onset.replace(tzinfo=dt.timezone.utc)
    start = max(first, onset - dt.timedelta(days=7)) if first else onset - dt.timedelta(days=7)
    end = (last + dt.timedelta(hours=1)) if last else onset + dt.timedelta(days=1)
    points = chart_series.regression_series(con, r, start, end)
    png = charts.regression_chart(points, onset, r.before, r.after, r.series, band=_band(points, onset), width_in=9.5)
    chart = "data:image/png;base64," + base64.b64encode(png).decode()
    return jinja.env().get_template("detail.html").render(
        item=item, r=r, day=day, chart=chart, points=points, report_href=report_href, gpu_labels=_gpu_labels(con),
        generated=dt.datetime.now(dt.timezone.utc), subject=f"cudawatch regression {r.event_id}",
    )


def parse_day(value: str | dt.date | None, con) -> dt.date:
    if isinstance(value, dt.date):
        return value
    if value is None:
        day = data.last_day(con)
        if day is None:
            raise ReportError("the warehouse has no kernel or device data yet (run `cudawatch ingest` first)")
        return day
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ReportError(f"--date {value!r} is not a date like 2026-11-02") from exc


def render_report(con, day: dt.date, *, regressions: list[Regression] | None = None) -> str:
    """The self-contained HTML report for ``day`` (charts as ``data:`` URIs)."""
    return build_report(con, day, regressions=regressions).html


def render_report_text(con, day: dt.date, *, regressions: list[Regression] | None = None) -> str:
    """The plain-text version of the report (the ``text/plain`` part of the e-mail)."""
    return build_report(con, day, regressions=regressions).text


def write_report(db, out, date: str | dt.date | None = None, *, regressions: list[Regression] | None = None) -> Path:
    """Write the HTML report for ``date`` (default: the last UTC day with data) to ``out``, and one
    detail page per regression beside it (``<out stem>-<event_id>.html``). Returns ``out``.

    db: the warehouse path or an ``analytics.store.Store`` (opened for reading; it waits while a
    writer holds the file). For the last day of the data, regressions that began on earlier days
    and are still open are included as ``ongoing``, so a 48 h demo's report shows everything still wrong."""
    from analytics.store import Store

    out = Path(out)
    store = db if isinstance(db, Store) else Store(db)
    with store.reader(queue=True) as con:
        rendered = build_archived_report(con, parse_day(date, con), out, regressions=regressions)
    return write_rendered(rendered, out)


def build_archived_report(con, day: dt.date, out, *, regressions: list[Regression] | None = None,
                          report_url: str | None = None) -> RenderedReport:
    """``build_report`` for a report file at ``out`` with its detail pages beside it."""
    out = Path(out)
    return build_report(con, day, regressions=regressions, detail_href=lambda r: f"{out.stem}-{r.event_id}.html",
                        report_href=out.name, report_url=report_url)


def write_rendered(rendered: RenderedReport, out) -> Path:
    """Write a rendered report (``html``) to ``out`` and its detail pages beside it; returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for event_id, page in rendered.details.items():
        _write_atomic(out.parent / f"{out.stem}-{event_id}.html", page)
    _write_atomic(out, rendered.html)
    return out


def _write_atomic(path: Path, text: str) -> None:
    with atomic_file(path) as fh:
        fh.write(text.encode("utf-8"))


__all__ = [
    "RenderedReport", "ReportError", "ReportIncident", "build_report", "classify", "incident_order", "render_detail", "render_report",
    "render_report_text", "write_report", "build_archived_report", "write_rendered",
]
