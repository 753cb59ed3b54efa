"""The collector's window → Parquet spool path keeps nothing per window: fed real H200 records
window after window (aggregator, row building, spool files), its memory stays flat once pyarrow's
caches are warm.

The first test found a leak: the spool named each window's file with ``pathlib``, whose parts
CPython 3.12 (the GPU hosts' Python) interns forever (python/cpython#121780), one unique name per
window and table. On CPython 3.11, where CI runs, interned strings are freed, so the tracemalloc
test cannot see that leak; it guards against anything else this path would keep per window.
Not covered here: the tracer's callback and the binding's record objects, detach/attach cycles,
the controller and the duty log (bounded by ``DUTY_LOG_MAX``).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc

import pytest

from collector.aggregate import Aggregator
from collector.rows import ProcessMeta
from collector.spool import Spool

WARM, BATCH = 100, 200


@pytest.fixture()
def window(tmp_path, records):
    kernels, copies = records
    kernels, copies = kernels[:100], copies[:10]
    t0 = kernels[0][0]
    spool = Spool(tmp_path, ProcessMeta(host="h", job="j", run_id="r", pid=1), window_s=1)

    def one(i: int) -> None:
        agg = Aggregator(window_s=1)
        shift = 1_700_000_000_000_000_000 + i * 1_000_000_000 - t0
        agg.add_kernels([(s + shift, e + shift, sig) for s, e, sig in kernels])
        agg.add_copies([(c[0] + shift, c[1] + shift, *c[2:]) for c in copies])
        assert spool.add_windows(agg.take_all()) >= 2

    return one


def test_no_string_is_interned_per_window(window, monkeypatch):
    """CPython 3.12 never frees an interned string; pathlib interns every part of a Path it parses."""
    for i in range(5):
        window(i)
    interned = []
    real = sys.intern
    monkeypatch.setattr(sys, "intern", lambda s: interned.append(s) or real(s))
    for i in range(5, 25):
        window(i)
    assert interned == []


def test_the_window_to_spool_path_retains_nothing_per_window(window):
    for i in range(WARM):
        window(i)
    gc.collect()
    tracemalloc.start()
    try:
        growth = []
        for batch in range(3):
            before = tracemalloc.get_traced_memory()[0]
            for i in range(WARM + batch * BATCH, WARM + (batch + 1) * BATCH):
                window(i)
            gc.collect()
            growth.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    # a leak grows every batch, allocator noise does not: one leaked 48-byte object per window
    # would be 9.4 KiB in each of the last two batches (measured without a leak: ~3 KiB)
    assert min(growth[1:]) < 8 * 1024, growth
