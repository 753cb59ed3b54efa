"""Aggregation of real recorded CUPTI records (H200, PyTorch training loop) into window summaries."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from collector.aggregate import Aggregator
from cudawatch.shards import hist_bucket


def _expected(kernels, window_s, offset):
    exp = defaultdict(list)
    for start, end, sig in kernels:
        exp[((start + offset) // (window_s * 10**9) * window_s, sig)].append(end - start)
    return exp


@pytest.mark.parametrize("fold", [1024, 7])  # 7 forces many numpy folds per signature
def test_kernel_summaries_match_direct_computation(records, fold):
    kernels, _ = records
    assert len(kernels) > 3000
    offset = 12_345
    agg = Aggregator(window_s=2, clock_offset_ns=offset)
    agg.FOLD = fold
    assert agg.add_kernels(kernels) == len(kernels)
    windows = agg.take_all()
    got = {(w.start_s, sig): s for w in windows for sig, s in w.kernels.items()}
    exp = _expected(kernels, 2, offset)
    assert set(got) == set(exp)
    for key, durations in exp.items():
        s = got[key]
        assert s.launches == len(durations)
        assert s.total_ns == sum(durations)
        assert s.min_ns == min(durations) and s.max_ns == max(durations)
        assert math.isclose(s.sumsq_ns2, sum(float(d) * d for d in durations), rel_tol=1e-12)
        hist = defaultdict(int)
        for d in durations:
            hist[hist_bucket(d)] += 1
        assert s.hist == dict(hist)


def test_window_assignment_uses_clock_offset(records):
    kernels, _ = records
    agg = Aggregator(window_s=60, clock_offset_ns=0)
    agg.add_kernels(kernels[:10])
    (w,) = agg.take_all()
    assert w.start_s == kernels[0][0] // 60_000_000_000 * 60


def test_incomplete_records_are_skipped_and_counted():
    agg = Aggregator(window_s=60)
    sig = ("k", 1, 1, 1, 32, 1, 1, 8, 0, 0)
    assert agg.add_kernels([(0, 0, sig), (10, 5, sig), (10**12, 10**12 + 100, sig)]) == 1
    assert agg.invalid == 2
    assert agg.add_copies([(0, 10, "HtoD", "pinned", "device", 4, 0)]) == 0


def test_memcpy_summaries(records):
    _, copies = records
    agg = Aggregator(window_s=3600)
    agg.add_copies(copies)
    windows = agg.take_all()
    total = {}
    for w in windows:
        for key, s in w.copies.items():
            t = total.setdefault(key, [0, 0, 0])
            t[0] += s.count
            t[1] += s.bytes
            t[2] += s.total_ns
    exp = {}
    for start, end, kind, src, dst, nbytes, dev in copies:
        t = exp.setdefault((kind, src, dst, dev), [0, 0, 0])
        t[0] += 1
        t[1] += nbytes
        t[2] += end - start
    assert total == exp
    assert ("HtoD", "pageable", "device", 0) in total  # the real loop's pageable uploads


def test_take_closed_keeps_open_windows(records):
    kernels, _ = records
    agg = Aggregator(window_s=1, clock_offset_ns=0)
    agg.add_kernels(kernels)
    last_end_s = max(k[0] for k in kernels) / 1e9
    closed = agg.take_closed(now_unix_s=last_end_s, grace_s=0)
    assert closed and all(w.start_s + 1 <= last_end_s for w in closed)
    assert agg.open_windows() >= 1
    rest = agg.take_all()
    assert sum(s.launches for w in closed + rest for s in w.kernels.values()) == len(kernels)


def test_memory_is_bounded_by_signatures_not_records():
    agg = Aggregator(window_s=3600)
    sigs = [(f"k{i}", 1, 1, 1, 128, 1, 1, 16, 0, 0) for i in range(20)]
    base = 10**18
    for chunk in range(50):
        agg.add_kernels([(base + j, base + j + 1000 + j % 97, sigs[j % 20]) for j in range(chunk * 4000, (chunk + 1) * 4000)])
        assert agg.buffered_bytes() <= 20 * agg.FOLD * 8
    assert agg.signatures() <= 40
    assert agg.records_total == 200_000


def test_traced_time_spreads_over_windows():
    agg = Aggregator(window_s=10)
    agg.add_traced_time(1_000_005.0, 1_000_025.0)
    got = {w.start_s: w.traced_s for w in agg.take_all()}
    assert got == pytest.approx({1_000_000: 5.0, 1_000_010: 10.0, 1_000_020: 5.0})
