"""benchmarks/spool_rss.py runs the product's window → spool → hourly shard path and reads its RSS."""

import pyarrow.parquet as pq
import pytest

from benchmarks import spool_rss


def test_every_hour_is_rotated_into_shards(tmp_path):
    res = spool_rss.run(windows=240, window_s=60, kernels_per_window=200, root=str(tmp_path))
    assert [w for w, _ in res["rss_mib_at_rotations"]] == [60, 120, 180, 240]
    shards = sorted(tmp_path.glob("*/date=*/hour=*/*.parquet"))
    assert res["shards_written"] == len(shards) == 4 * 3  # kernels, memcpy, health per hour
    kernels = [s for s in shards if s.parts[-4] == "kernels"]
    assert sum(pq.read_metadata(s).num_rows for s in kernels) > 0
    assert res["rss_slope_mib_per_1000_windows"] is not None


def test_slope_is_per_thousand_windows_after_the_first_quarter():
    pts = [(60, 500.0), (120, 100.0), (180, 100.5), (240, 101.0), (300, 101.5)]
    assert spool_rss.slope_per_1000(pts) == pytest.approx(1000 * 0.5 / 60)
    assert spool_rss.slope_per_1000(pts[:2]) is None  # fewer than 3 points after the first quarter


def test_a_window_that_does_not_divide_an_hour_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="divide an hour"):
        spool_rss.run(windows=10, window_s=7, kernels_per_window=10, root=str(tmp_path))
