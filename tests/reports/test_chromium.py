"""The report in a real browser: headless Chromium loads it without console errors and draws
every chart (non-blank pixels inside each chart's box), on a laptop and a phone width."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from reports import render
from tests.reports import chromium, fleet


def _need_chromium():
    if chromium.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI runs this test")


@pytest.fixture(scope="module")
def report_file(fleet_db, tmp_path_factory):
    _need_chromium()
    out = tmp_path_factory.mktemp("browser") / "report.html"
    return render.write_report(fleet_db, out, "2026-11-01", regressions=fleet.regressions())


def _ink(img: Image.Image, box: dict) -> float:
    """Share of pixels in the box that are not (near) white."""
    crop = img.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["w"]), int(box["y"] + box["h"]))).convert("L")
    hist = crop.histogram()
    return 1 - sum(hist[245:]) / max(1, sum(hist))


def _check_page(page, width, regressions):
    assert page.errors == []
    names = {c["name"] for c in page.charts}
    assert {"top-kernels", "utilisation"} <= names and sum(n.startswith("regression-") for n in names) == regressions
    img = Image.open(io.BytesIO(page.png)).convert("RGB")
    assert img.size == (width, page.height)
    for chart in page.charts:
        assert chart["complete"] and chart["natural_width"] > 0, chart
        assert chart["w"] > 0.6 * min(width, 1000) - 80 and chart["h"] > 60, chart  # scaled to the column, not clipped
        assert _ink(img, chart) > 0.03, chart["name"]  # something is drawn in the box
    heat = next(c for c in page.charts if c["name"] == "utilisation")
    assert _ink(img, heat) > 0.3  # the heatmap fills its box with colour
    assert page.scroll_width <= width + 1  # no sideways scrolling of the page


def test_demo_report_loads_cleanly_and_draws_every_chart(tmp_path):
    """The real pipeline (simulator -> shards -> warehouse -> detection -> root cause -> report),
    on a smaller fleet than ``cudawatch demo`` to keep the test fast."""
    _need_chromium()
    from app.demo import run_demo

    result = run_demo(tmp_path / "demo", gpus=4, hours=28)
    assert result.regressions, "the demo fleet has injected regressions"
    page = chromium.render(result.report, width=1100)
    _check_page(page, 1100, len(result.regressions))


def test_report_reads_on_a_phone(report_file):
    page = chromium.render(report_file, width=390)
    _check_page(page, 390, 3)


def test_blank_detector_catches_an_empty_box():
    img = Image.new("RGB", (400, 300), "white")
    box = {"x": 10, "y": 10, "w": 200, "h": 100}
    assert _ink(img, box) == 0
    img.paste((30, 60, 200), (50, 40, 120, 80))
    assert _ink(img, box) > 0.03


#: readable text: regression charts draw 10 pt at charts.DPI; shown smaller than this many CSS px is too small
MIN_CHART_TEXT_PX = 8.0


@pytest.mark.parametrize("width", [400, 1280])
def test_report_layout_at_phone_and_laptop_width(report_file, width):
    """At 400 px the "At a glance" table becomes one card per regression with the change, the
    onset and the cause on screen; at 1280 px it stays a table (one line per regression). In both,
    nothing scrolls sideways, the headline size and evidence are readable and chart text is at
    least MIN_CHART_TEXT_PX."""
    from reports.charts import DPI

    page = chromium.render(report_file, width=width)
    _check_page(page, width, 3)
    rows = [c for c in page.checks if c["kind"] == "glance"]
    changes = [c for c in page.checks if c["kind"] == "change"]
    assert len(rows) == len(changes) == 3
    for box in rows + changes:
        assert box["w"] > 0 and box["x"] >= 0 and box["x"] + box["w"] <= width + 1, box  # on screen
    for change in changes:
        assert "%" in change["text"] or "was 0" in change["text"], change
    if width < 600:
        assert all(r["h"] > 100 for r in rows)  # a card: severity, status, job, what, change, since, cause
        assert all(c["w"] < width and c["x"] < 80 for c in changes)  # each field on its own line
    else:
        assert all(r["h"] < 90 for r in rows)  # one table line (the name may wrap once)
    for box in page.checks:
        if box["kind"] in ("size", "evidence"):
            assert box["font_px"] >= 12 and box["x"] + box["w"] <= width + 1, box
    for chart in page.charts:
        if chart["name"].startswith("regression-"):
            text_px = 10 / 72 * DPI * chart["w"] / chart["natural_width"]
            assert text_px >= MIN_CHART_TEXT_PX, (chart, text_px)


@pytest.fixture(scope="module")
def incident_report(fleet_db, tmp_path_factory):
    """The fleet's report with a 4-kernel contention incident of job train added (hostile names)."""
    _need_chromium()
    import dataclasses

    from analytics.results import Finding

    gemm = fleet.regressions()[0]
    members = [dataclasses.replace(gemm, kernel=f"{fleet.EVIL} kernel_{i}", kernel_id=f"k{i:015d}", severity=sev,
                                   causes=(Finding("contention", 0.8, {"other_jobs_before": 0, "other_jobs_after": 1,
                                                                       "other_busy_share_before": 0.0, "other_busy_share_after": 0.2}),))
               for i, sev in enumerate(("high", "low", "low", "medium"))]
    out = tmp_path_factory.mktemp("browser-incident") / "report.html"
    return render.write_report(fleet_db, out, "2026-11-01", regressions=fleet.regressions() + members)


@pytest.mark.parametrize("width", [400, 1280])
def test_incident_rows_fit_at_phone_and_laptop_width(incident_report, width):
    """An incident's heading row and its members in At a glance: on screen, escaped, no sideways
    scrolling; the incident heading above its members' cards."""
    page = chromium.render(incident_report, width=width)
    _check_page(page, width, 7)
    heads = [c for c in page.checks if c["kind"] == "incident"]
    rows = [c for c in page.checks if c["kind"] == "glance"]
    assert len(heads) == 1 and len(rows) == 7
    for box in heads + rows:
        assert box["w"] > 0 and box["x"] >= 0 and box["x"] + box["w"] <= width + 1, box
    assert "4 regressions" in heads[0]["text"] and "contention" in heads[0]["text"]
    members = sorted(rows, key=lambda b: b["y"])
    after = [r for r in members if r["y"] > heads[0]["y"]]
    assert len(after) >= 4  # the members follow their heading
    assert [c for c in page.checks if c["kind"] == "incident-head"]
    html = incident_report.read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
