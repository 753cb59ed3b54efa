"""benchmarks/step_log.py: the soak's step times on disk in fixed chunks, and the model of the old
in-memory log that re-reads soaks recorded before (checked against CPython's own array)."""

import array
import sys

import numpy as np
import pytest

import step_log


def test_every_step_time_reaches_the_file_in_order_across_chunks(tmp_path):
    path = tmp_path / "x.steps.f64"
    log = step_log.StepLog(path, chunk=7)
    times = [1.7e9 + 0.001 * i for i in range(23)]  # three full chunks and a partial one
    held = []
    for t in times:
        log.append(t)
        held.append(sys.getsizeof(log._buf))
    log.close()
    back = array.array("d")
    back.frombytes(path.read_bytes())
    assert list(back) == times and log.count == 23
    assert len(set(held)) == 1  # the buffer never grows


@pytest.mark.parametrize("n", [0, 1, 4, 5, 8, 9, 16, 17, 1000, 65_537, 1_020_026])
def test_array_bytes_is_what_cpython_allocates_for_n_appends(n):
    a = array.array("d")
    empty = sys.getsizeof(a)
    for i in range(n):
        a.append(float(i))
    assert step_log.array_bytes(n) == sys.getsizeof(a) - empty


def _train(rss, steps_per_min):
    t0 = 1_796_000_010.0  # 10 s into a window
    spw = {str(1_796_000_000 + 60 * k): n for k, n in enumerate(steps_per_min)}
    return {"t0": t0, "window_s": 60, "steps": sum(steps_per_min), "steps_per_window": spw, "rss": rss}


def test_steps_are_interpolated_within_each_window_from_the_run_start():
    tr = _train([[5.0, 1.0], [110.0, 1.0]], [500, 600])  # first window: 50 s of the run
    got = step_log.steps_at(tr, np.array([0.0, 25.0, 50.0, 80.0, 115.0]))
    assert got == pytest.approx([0, 250, 500, 800, 1100])


def test_a_process_that_only_grew_a_real_step_log_reads_flat_without_it():
    """RSS made of CPython's own array growth (1,000 appends a second, sampled every 5 s) minus the
    model of it: flat, and the largest step after 2 minutes falls on a resize."""
    t = np.arange(5.0, 900.0, 5.0)
    a, empty, rss, done = array.array("d"), sys.getsizeof(array.array("d")), [], 0
    for x in t:
        while done < 1000 * x:
            a.append(0.0)
            done += 1
        rss.append([float(x), 700.0 + (sys.getsizeof(a) - empty) / 2**20])
    # windows of the run: [0, 50) s, then 60-s windows, the last cut at 900 s
    tr = _train(rss, [50_000] + [60_000] * 14 + [10_000])
    res = step_log.rss_without_step_log(tr)
    assert res["recorded"]["slope_mib_per_min"] == pytest.approx(60_000 * 8 / 2**20, rel=0.1)
    assert res["without_step_log"]["slope_mib_per_min"] == pytest.approx(0, abs=1e-9)
    assert res["without_step_log"]["growth_after_2min_mib"] == pytest.approx(0, abs=1e-9)
    assert res["largest_rss_step"]["step_log_resized"]


def test_a_run_too_short_for_a_growth_after_2_minutes_is_refused():
    with pytest.raises(ValueError, match="beyond its first 2 minutes"):
        step_log.rss_without_step_log(_train([[5.0, 1.0], [60.0, 1.0], [115.0, 1.0]], [1000, 1000]))
    with pytest.raises(ValueError, match="0 RSS samples"):
        step_log.rss_without_step_log(_train([], [1000]))


def test_a_loop_that_raises_leaves_its_finished_steps_on_disk(tmp_path):
    path = tmp_path / "x.steps.f64"
    with pytest.raises(RuntimeError):
        with step_log.StepLog(path, chunk=4) as log:
            for i in range(6):
                log.append(float(i))
            raise RuntimeError("step failed")
    log.close()  # a second close is harmless
    assert np.frombuffer(path.read_bytes()).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_run_recorded_with_the_streamed_log_is_reported_as_recorded():
    t = np.arange(5.0, 900.0, 5.0)
    tr = _train([[float(x), 700.0 + 0.01 * x] for x in t], [60_000] * 16)
    tr["step_log"] = "streamed"
    res = step_log.rss_without_step_log(tr)
    assert res["step_log_mib_at_end"] == 0
    assert res["without_step_log"] == res["recorded"]
    assert res["recorded"]["slope_mib_per_min"] == pytest.approx(0.6)


def test_theil_sen_is_the_median_of_pairwise_slopes_and_ignores_a_step():
    import math
    import random
    import statistics

    rng = random.Random(3)
    pts = [(5.0 * i, 100 + rng.gauss(0, 1)) for i in range(40)] + [(200.0, 100.0)]  # a repeated time: skipped
    pairwise = [(b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(pts) for b in pts[i + 1:] if b[0] > a[0]]
    assert step_log.theil_sen_mib_per_min(pts) == pytest.approx(60 * statistics.median(pairwise))
    stepped = [(t, 0.5 * t / 60 + (30.0 if t > 600 else 0.0)) for t in range(0, 650, 5)]  # +30 MiB near the end
    assert step_log.theil_sen_mib_per_min(stepped) == pytest.approx(0.5, abs=0.05)
    assert math.isnan(step_log.theil_sen_mib_per_min([(1.0, 2.0)])) and math.isnan(step_log.theil_sen_mib_per_min([]))
    assert math.isnan(step_log.theil_sen_mib_per_min([(1.0, 2.0), (1.0, 3.0)]))


def test_least_squares_slope_is_the_regression_slope_per_minute_and_nan_when_undefined():
    import math
    import random
    import statistics

    rng = random.Random(3)
    pts = [(5.0 * i, 100 + 0.02 * i + rng.gauss(0, 0.3)) for i in range(40)]
    want = 60 * statistics.linear_regression([t for t, _ in pts], [v for _, v in pts]).slope
    assert step_log.least_squares_mib_per_min(pts) == pytest.approx(want, rel=1e-9)
    for undefined in ([], pts[:2], [(7.0, 1.0), (7.0, 2.0), (7.0, 3.0)]):
        assert math.isnan(step_log.least_squares_mib_per_min(undefined))
