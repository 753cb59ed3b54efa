"""The HTML/text report from a real warehouse (shards -> DuckDB), with constructed regressions."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import pytest

from analytics import store
from analytics.store import chart_series
from analytics.store import report as data
from reports import render
from reports.escape import plain, slack, slack_code, truncate_middle
from tests.reports import fleet

DAY1 = fleet.START.date()
DAY2 = DAY1 + dt.timedelta(days=1)


@pytest.fixture(scope="module")
def day1(fleet_db):
    con = store.connect(fleet_db, read_only=True)
    try:
        return render.build_report(con, DAY1, regressions=fleet.regressions(), detail_href=lambda r: f"d-{r.event_id}.html")
    finally:
        con.close()


def test_summary_counts_fleet_and_regressions(day1):
    html = day1.html
    assert re.search(r"<span>GPUs · hosts</span><b>4 · 2</b>", html)
    assert re.search(r"<span>Jobs</span><b>2</b>", html)
    # day 1: gemm (onset 20:00) and clock (22:00) are new, the launches one (08:00) too
    assert re.search(r"New regressions</span><b class=\"bad\">3</b>", html)
    assert day1.subject == "cudawatch 2026-11-01: 3 new, 0 ongoing regressions (worst: critical)"


def test_regression_sections_show_evidence_causes_and_links(day1):
    html = day1.html
    gemm = fleet.regressions()[0]
    section = html[html.index(f'id="r-{gemm.event_id}"'):]
    section = section[: section.index("</div>\n\n")] if "</div>\n\n" in section else section
    for expected in ("+20.0%", "2026-11-01 20:00 UTC", "420.0 → 504.0 µs", "1.0e-09", "62.0%", "kernel slower same config",
                     "Profile the kernel with Nsight Compute", f'href="d-{gemm.event_id}.html"', "132x1x1/256x1x1/r128/s49152"):
        assert expected in section, expected
    # causes ranked by confidence
    assert section.index("kernel slower same config") < section.index("gpu clocks throttled")
    assert set(day1.details) == {r.event_id for r in fleet.regressions()}


def test_charts_are_png_data_uris(day1):
    srcs = re.findall(r'<img class="chart[^"]*" data-chart="([^"]+)" src="data:image/png;base64,([^"]+)"', day1.html)
    assert {name for name, _ in srcs} == {"top-kernels", "utilisation", *(f"regression-{r.event_id}" for r in fleet.regressions())}
    assert all(len(b64) > 2000 for _, b64 in srcs)
    assert "<script" not in day1.html.replace("&lt;script", "")  # no JavaScript at all


def test_hostile_names_are_escaped_in_html_and_text(day1):
    assert fleet.EVIL not in day1.html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;!channel&gt;" in day1.html
    for page in day1.details.values():
        assert "<script>" not in page
    assert fleet.EVIL in day1.text  # plain text is inert; it must still say which kernel
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", day1.text)


def test_data_gaps_and_quarantine_are_reported(fleet_db):
    con = store.connect(fleet_db)
    try:
        start, end = data.day_window(DAY1)
        gaps = data.data_gaps(con, start, end, fleet.START + dt.timedelta(hours=fleet.HOURS - 1))
    finally:
        con.close()
    assert [(g["table"], g["host"], g["ranges"]) for g in gaps.missing] == [("device", "host-b", "10:00–10:59")]
    assert [q["path"].split("/")[-1] for q in gaps.quarantined] == ["host-c-9-0123456789ab.parquet"]
    assert gaps.quarantined[0]["reason"]


def test_fleet_health_shows_throttling_and_collector_drops(fleet_db):
    con = store.connect(fleet_db)
    try:
        start, end = data.day_window(DAY1)
        gpus = data.gpu_health(con, start, end)
        coll = {c["job"]: c for c in data.collector_health(con, start, end)}
        grid = data.utilisation_grid(con, start, end)
    finally:
        con.close()
    worst = gpus[0]
    assert (worst["host"], worst["gpu_index"], worst["reasons"]) == ("host-b", 1, "HW thermal")
    assert worst["throttled"] == pytest.approx(2 / 23)  # hours 22 and 23 of the 23 hours with samples (10 is a gap)
    assert coll["train"]["dropped"] == 200 and coll["train"]["windows_over_budget"] == 8  # hour 3, 4 windows x 2 hosts
    # health v2: one window of host-b's infer process delivered 5,000 records, none valid
    assert (coll["infer"]["error_windows"], coll["infer"]["invalid"], coll["train"]["error_windows"]) == (1, 5000, 0)
    assert grid.gpus == ["host-a:0", "host-a:1", "host-b:0", "host-b:1"] and len(grid.hours) == 24
    assert all(v != v for v in [grid.values[3][10]]) and grid.values[0][10] == grid.values[0][10]  # NaN only in the gap


def test_default_day_is_the_last_with_data_and_keeps_open_regressions(fleet_db, tmp_path):
    out = tmp_path / "report.html"
    render.write_report(fleet_db, out, None, regressions=fleet.regressions())
    html = out.read_text()
    assert "cudawatch daily report · 2026-11-02" in html
    assert re.search(r"Ongoing</span><b class=\"bad\">3</b>", html)  # day-1 events still open on day 2
    details = sorted(p.name for p in tmp_path.glob("report-*.html"))
    assert details == sorted(f"report-{r.event_id}.html" for r in fleet.regressions())
    assert 'href="report.html"' in (tmp_path / details[0]).read_text()


def test_classify_by_report_day():
    regs = fleet.regressions()
    resolved = dataclasses.replace(regs[0], status="resolved")
    future = dataclasses.replace(regs[1], onset=fleet.START + dt.timedelta(days=3))
    start, end = data.day_window(DAY2)
    got = [(s, r.event_id) for s, r in render.classify([regs[0], regs[2], resolved, future], start, end)]
    assert [s for s, _ in got] == ["ongoing", "ongoing", "resolved"]
    assert got[0][1] == regs[2].event_id  # critical before high


def test_series_of_each_kind_is_found(fleet_db):
    con = store.connect(fleet_db)
    try:
        start, end = fleet.START, fleet.START + dt.timedelta(hours=fleet.HOURS)
        gemm, evil, clock = fleet.regressions()
        g = chart_series.regression_series(con, gemm, start, end)
        c = chart_series.regression_series(con, clock, start, end)
        unknown = chart_series.regression_series(con, dataclasses.replace(gemm, series="kernel_; DROP TABLE kernels"), start, end)
    finally:
        con.close()
    assert len(g) == fleet.HOURS and g[0][1] == pytest.approx(420_000, rel=0.03) and g[-1][1] == pytest.approx(504_000, rel=0.03)
    by_hour = {h.hour + 24 * (h.day - 1): v for h, v in c}
    assert 10 not in by_hour and [by_hour[h] for h in (21, 22, 23)] == [1980.0, 1500.0, 1500.0]
    assert unknown == []


def test_bad_date_and_empty_warehouse_are_clear_errors(fleet_db, tmp_path):
    with pytest.raises(render.ReportError, match="not a date"):
        render.write_report(fleet_db, tmp_path / "x.html", "yesterday")
    empty = tmp_path / "empty.duckdb"
    store.connect(empty).close()
    with pytest.raises(render.ReportError, match="no kernel or device data"):
        render.write_report(empty, tmp_path / "x.html", None)
    with pytest.raises(FileNotFoundError):
        render.write_report(tmp_path / "missing.duckdb", tmp_path / "x.html", None)


def test_escape_helpers():
    assert slack("<!channel> & <@U123>") == "&lt;!channel&gt; &amp; &lt;@U123&gt;"
    assert slack_code("a`b<c>") == "`a'b&lt;c&gt;`"
    assert plain("a\r\nb\x00c\u202e") == "a  bc"
    assert truncate_middle("x" * 50 + "TAIL", 20).endswith("TAIL") and len(truncate_middle("x" * 100, 20)) == 20


def test_a_job_that_starts_late_is_not_a_gap_but_a_hole_is(tmp_path):
    import numpy as np
    import pyarrow as pa

    from cudawatch import shards

    rng = np.random.default_rng(1)
    root = tmp_path / "shards"
    for hour in range(12):
        h = fleet.START + dt.timedelta(hours=hour)
        if hour not in (6, 7):  # host-x's collector lost two hours in the middle
            shards.write_shard(root, "kernels", pa.Table.from_pylist(fleet._kernel_rows(rng, "host-x", 0, hour)), h, host="host-x", pid=1)
        if hour >= 3:  # host-y's job started at 03:00
            shards.write_shard(root, "kernels", pa.Table.from_pylist(fleet._kernel_rows(rng, "host-y", 0, hour)), h, host="host-y", pid=1)
        if hour != 4:  # the agent is always on: a missing device hour is a gap
            shards.write_shard(root, "device", pa.Table.from_pylist(fleet._device_rows(rng, "host-y", 0, hour)), h, host="host-y", pid=2)
    con = store.connect(tmp_path / "w.duckdb")
    try:
        store.ingest_shards(root, con)
        start, end = data.day_window(DAY1)
        gaps = data.data_gaps(con, start, end, fleet.START + dt.timedelta(hours=11))
    finally:
        con.close()
    assert [(g["table"], g["host"], g["ranges"]) for g in gaps.missing] == [
        ("device", "host-y", "04:00–04:59"), ("kernels", "host-x", "06:00–07:59")]


def test_charts_draw_names_with_dollar_signs_literally():
    """Matplotlib would parse `$...$` in an untrusted kernel name as mathtext and fail."""
    from reports import charts

    hostile = r"k<$\frac{a}$> $x^2$ $\badcommand$"
    png = charts.top_kernels_chart([{"job": hostile, "kernel": hostile, "gpu_hours": 10.0, "share": 0.5}])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_fleet_health_says_when_records_arrived_but_none_were_valid(day1):
    """A window where CUPTI delivered records but none were valid reads as missing data in the
    report, never as "no kernels ran"."""
    html = day1.html
    assert re.search(r"infer: in 1 collector window CUPTI delivered records but none were valid\s+\(5,000 without usable timestamps\)", html)
    assert "train: in" not in html
