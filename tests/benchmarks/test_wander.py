"""benchmarks/wander.py: sampling noise against wander, on the real capture kept in tests/data/cupti
and on windows built to have none or a known wander."""

from pathlib import Path

import numpy as np
import pytest

import wander

ROOT = Path(__file__).resolve().parents[2]


def _windows(levels: np.ndarray, n: int, sd: float, rng) -> np.ndarray:
    """Shard-like (launches, total_ns, sumsq_ns2) per window, launches drawn around each level."""
    out = []
    for mu in levels:
        x = rng.normal(mu, sd, n)
        out.append((n, x.sum(), (x**2).sum()))
    return np.array(out)


def test_independent_launches_read_as_sampling_noise():
    rng = np.random.default_rng(7)
    series = {(i,): _windows(np.full(60, 10_000.0), 400, 800.0, rng) for i in range(40)}
    rows = {r["windows_per_block"]: r for r in wander.summarize(series)["by_block"]}
    for k in (1, 3, 6):  # 60, 20 and 10 blocks: a variance with enough degrees of freedom
        assert 0.7 < rows[k]["ratio_median"] < 1.4, rows[k]


def test_wander_makes_the_ratio_grow_with_the_block():
    rng = np.random.default_rng(8)
    # a random walk of the level: 0.3 % of the mean per window
    series = {(i,): _windows(10_000.0 * np.exp(np.cumsum(rng.normal(0, 0.003, 60))), 400, 800.0, rng) for i in range(40)}
    rows = {r["windows_per_block"]: r for r in wander.summarize(series)["by_block"]}
    assert rows[1]["ratio_median"] > 2
    assert rows[6]["ratio_median"] > 3 * rows[1]["ratio_median"]
    assert rows[6]["excess_pct_median"] > 0.5


def test_real_capture_thirty_seconds_is_sampling_noise():
    series = wander.load_windows(ROOT / "tests" / "data" / "cupti" / "shards", 50)
    res = wander.summarize(series)
    assert res["series"] == 79  # kernel series with >= 50 launches in at least one 10-s window
    first = res["by_block"][0]
    assert first["windows_per_block"] == 1 and 0.5 < first["ratio_median"] < 2


def test_no_shards_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="no kernel shards"):
        wander.load_windows(tmp_path, 50)


def test_real_capture_eight_minutes_correlated_windows_little_wander():
    """The 8-minute LM capture of 2026-12-04 (docs/detection.md): window means spread more than the
    launches predict (ratio > 1.5 at 10 s), and the excess shrinks with the block instead of growing."""
    root = ROOT / "tests" / "data" / "cupti" / "bench" / "session_20261204c" / "wander_shards"
    rows = {r["windows_per_block"]: r for r in wander.summarize(wander.load_windows(root, 50))["by_block"]}
    assert rows[1]["series"] == 72
    assert rows[1]["ratio_median"] > 1.5
    assert rows[12]["excess_pct_median"] < 0.5 * rows[1]["excess_pct_median"]


def _timed(series: dict) -> dict:
    """Window starts as column 3 (10-s windows), as load_windows returns them."""
    return {k: np.column_stack([w, 10.0 * np.arange(len(w))]) for k, w in series.items()}


def test_common_mode_tells_kernels_moving_together_from_independent_ones():
    rng = np.random.default_rng(9)
    shared = np.exp(rng.normal(0, 0.01, 40))  # one level for all series: every window moves them together
    together = _timed({(i,): _windows(10_000.0 * shared, 400, 50.0, rng) for i in range(12)})
    apart = _timed({(i,): _windows(10_000.0 * np.exp(rng.normal(0, 0.01, 40)), 400, 50.0, rng) for i in range(12)})
    t, a = wander.common_mode(together), wander.common_mode(apart)
    assert t["series"] == 12 and t["windows"] == 38
    assert t["corr_median"] > 0.8 and t["pc1_share"] > 0.8
    assert t["pc1_share"] > t["pc1_share_shuffled_p95"] + 0.1
    assert abs(a["corr_median"]) < 0.2 and a["pc1_share"] <= 1.1 * a["pc1_share_shuffled_p95"]
    assert wander.common_mode({(0,): np.ones((5, 3))}) is None  # no window starts: nothing to align


def test_real_capture_kernels_move_nearly_independently():
    """The 8-minute LM capture: one job's kernels barely move together window to window (pairwise
    correlation ~0), with a small common part above what shuffled windows give."""
    root = ROOT / "tests" / "data" / "cupti" / "bench" / "session_20261204c" / "wander_shards"
    c = wander.common_mode(wander.load_windows(root, 50))
    assert c["series"] == 72 and c["windows"] == 46
    assert abs(c["corr_median"]) < 0.1
    assert c["pc1_share_shuffled_p95"] < c["pc1_share"] < 0.3


def test_common_mode_keeps_the_windows_most_series_share():
    """A series with windows of its own (a kernel busy only while the others were not) must not
    drop every other series; a series with no spread at all is left out, not a NaN."""
    rng = np.random.default_rng(10)
    series = _timed({(i,): _windows(10_000.0 * np.exp(rng.normal(0, 0.01, 20)), 400, 50.0, rng) for i in range(8)})
    odd = _windows(np.full(3, 500.0), 400, 1.0, rng)
    series[("odd",)] = np.column_stack([odd, [1000.0, 1010.0, 1020.0]])  # starts no other series has
    flat = series[(0,)].copy()
    flat[:, 1] = flat[:, 0] * 7000.0  # the same mean in every window
    series[("flat",)] = flat
    c = wander.common_mode(series)
    assert c["series"] == 8 and c["windows"] == 18 and np.isfinite(c["corr_median"])
