"""benchmarks/spool_rss.py runs the product's window → spool → hourly shard path and reads its RSS."""

import pyarrow.parquet as pq
import pytest

import spool_rss


def test_each_hour_is_written_once_its_last_window_is_closed(tmp_path):
    res = spool_rss.run(windows=240, window_s=60, kernels_per_window=200, root=str(tmp_path))
    # hours 1-3 are combined during the run, a grace after they end; hour 4 at the final rotation
    assert res["shards_at_rotations"] == [3, 6, 9]  # kernels, memcpy, health per hour
    assert [w for w, _ in res["rss_mib_at_rotations"]] == [61, 121, 181]
    first = res["rss_mib_first_writes"]  # each one-off step measured at its own moment
    assert set(first) == {"before_first_write", "after_first_window", "after_first_hour"}
    assert all(v > 0 for v in first.values())
    shards = sorted(tmp_path.glob("*/date=*/hour=*/*.parquet"))
    assert res["shards_written"] == len(shards) == 4 * 3
    kernels = [s for s in shards if s.parts[-4] == "kernels"]
    assert sum(sum(pq.read_table(s, columns=["launches"]).column(0).to_pylist()) for s in kernels) == 240 * 200


def test_slope_is_per_thousand_windows_after_the_first_quarter():
    pts = [(60, 500.0), (120, 100.0), (180, 100.5), (240, 101.0), (300, 101.5)]
    assert spool_rss.slope_per_1000(pts) == pytest.approx(1000 * 0.5 / 60)
    assert spool_rss.slope_per_1000(pts[:2]) is None  # fewer than 3 points after the first quarter


@pytest.mark.parametrize("window_s", [7, 45])
def test_a_window_that_does_not_fit_the_period_and_hour_is_refused(tmp_path, window_s):
    with pytest.raises(SystemExit, match="divide an hour"):
        spool_rss.run(windows=10, window_s=window_s, kernels_per_window=10, root=str(tmp_path))
