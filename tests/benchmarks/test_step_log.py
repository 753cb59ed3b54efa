"""benchmarks/step_log.py: the soak's step times on disk in fixed chunks, and the model of the old
in-memory log that re-reads soaks recorded before (checked against CPython's own array)."""

import array
import sys

import numpy as np
import pytest

from benchmarks import step_log


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


def test_a_process_that_only_grew_its_step_log_reads_flat_without_it():
    t = np.arange(5.0, 900.0, 5.0)
    tr = _train([], [60_000] * 16)  # 1,000 steps/s
    tr["rss"] = [[float(x), 0.0] for x in t]
    n = step_log.steps_at(tr, t)
    tr["rss"] = [[float(x), 700.0 + step_log.array_bytes(int(k)) / 2**20] for x, k in zip(t, n)]
    res = step_log.rss_without_step_log(tr)
    assert res["recorded"]["slope_mib_per_min"] == pytest.approx(60_000 * 8 / 2**20, rel=0.1)
    assert res["without_step_log"]["slope_mib_per_min"] == pytest.approx(0, abs=1e-9)
    assert res["without_step_log"]["growth_after_2min_mib"] == pytest.approx(0, abs=1e-9)
    assert res["largest_rss_step"]["step_log_resized"]


def test_a_run_recorded_with_the_streamed_log_is_reported_as_recorded():
    t = np.arange(5.0, 900.0, 5.0)
    tr = _train([[float(x), 700.0 + 0.01 * x] for x in t], [60_000] * 16)
    tr["step_log"] = "streamed"
    res = step_log.rss_without_step_log(tr)
    assert res["step_log_mib_at_end"] == 0
    assert res["without_step_log"] == res["recorded"]
    assert res["recorded"]["slope_mib_per_min"] == pytest.approx(0.6)
