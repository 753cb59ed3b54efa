"""The report in a real browser: headless Chromium loads it without console errors and draws
every chart (non-blank pixels inside each chart's box), on a laptop and a phone width."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from reports import render
from tests.reports import chromium, fleet


@pytest.fixture(scope="module")
def report_file(fleet_db, tmp_path_factory):
    if chromium.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI runs this test")
    out = tmp_path_factory.mktemp("browser") / "report.html"
    return render.write_report(fleet_db, out, "2026-11-01", regressions=fleet.regressions())


def _ink(img: Image.Image, box: dict) -> float:
    """Share of pixels in the box that are not (near) white."""
    crop = img.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["w"]), int(box["y"] + box["h"]))).convert("L")
    hist = crop.histogram()
    return 1 - sum(hist[245:]) / max(1, sum(hist))


@pytest.mark.parametrize("width", [1100, 390])
def test_report_loads_cleanly_and_draws_every_chart(report_file, width):
    page = chromium.render(report_file, width=width)
    assert page.errors == []
    names = {c["name"] for c in page.charts}
    assert {"top-kernels", "utilisation"} <= names and sum(n.startswith("regression-") for n in names) == 3
    img = Image.open(io.BytesIO(page.png)).convert("RGB")
    assert img.size == (width, page.height)
    for chart in page.charts:
        assert chart["complete"] and chart["natural_width"] > 0, chart
        assert chart["w"] > 0.6 * min(width, 1000) - 80 and chart["h"] > 80, chart  # scaled to the column, not clipped
        assert _ink(img, chart) > 0.03, chart["name"]  # something is drawn in the box
    heat = next(c for c in page.charts if c["name"] == "utilisation")
    assert _ink(img, heat) > 0.3  # the heatmap fills its box with colour
    assert page.scroll_width <= width + 1  # no sideways scrolling of the page on a phone


def test_blank_detector_would_catch_a_missing_chart(report_file, tmp_path):
    broken = tmp_path / "broken.html"
    html = report_file.read_text()
    start = html.index('src="data:image/png;base64,') + len('src="')
    broken.write_text(html[:start] + "data:image/png;base64,AAAA" + html[html.index('"', start):])
    page = chromium.render(broken, width=1100)
    first = page.charts[0]
    assert first["natural_width"] == 0 or _ink(Image.open(io.BytesIO(page.png)).convert("RGB"), first) < 0.03
