"""The wait before a detach's forced flush: adaptation rule, configuration, and its place in the detach.

The detach order itself is checked with a stand-in for the ``cupti`` module (CI has no GPU and no
cupti-python): its forced flush returns the kernels that have not finished by then without
timestamps, as CUPTI does; the real effect is measured on the H200 (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from collector.drain import DEFAULT_MAX_S, DetachDrain

from .conftest import REPO


def test_a_lossy_detach_doubles_the_wait_up_to_the_maximum():
    d = DetachDrain(0.1, start_s=0.01)
    waits = []
    for _ in range(6):
        waits.append(d.wait_s())
        d.note(lost=400, waited_s=d.wait_s())
    assert waits == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1, 0.1])
    assert (d.detaches, d.lost, d.lossy) == (6, 2400, 6)
    assert d.waited_s == pytest.approx(sum(waits))


def test_clean_detaches_shrink_the_wait_to_the_minimum():
    d = DetachDrain(0.1, start_s=0.08, min_s=0.002)
    for _ in range(200):
        d.note(lost=0, waited_s=d.wait_s())
    assert d.wait_s() == pytest.approx(0.002)
    assert d.lossy == 0
    d.note(lost=1, waited_s=d.wait_s())  # a loss after shrinking: grows again from the minimum
    assert d.wait_s() == pytest.approx(0.004)


def test_the_wait_settles_just_above_a_steady_queue():
    """A program whose GPU queue always takes 30 ms to drain: after a few lossy detaches the wait
    covers the queue; from then on one detach in ~14 probes lower and loses records."""
    queue_s = 0.03
    d = DetachDrain(0.1)
    lossy_late = 0
    for i in range(200):
        w = d.wait_s()
        lost = 430 if w < queue_s else 0
        if i >= 20 and lost:
            lossy_late += 1
        d.note(lost, w)
    assert 0 < lossy_late <= 180 // 10  # shrinks 5 % per clean detach, doubles after a loss
    assert queue_s * 0.75 <= d.wait_s() <= 2 * queue_s


def test_env_sets_the_maximum_and_zero_turns_it_off(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_DETACH_DRAIN_MS", raising=False)
    assert DetachDrain().max_s == DEFAULT_MAX_S
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "40")
    assert DetachDrain().max_s == pytest.approx(0.04)
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "0")
    off = DetachDrain()
    for _ in range(5):
        off.note(lost=100, waited_s=off.wait_s())
    assert off.wait_s() == 0.0 and off.lost == 500


def test_a_malformed_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "fast")
    with pytest.raises(ValueError, match="CUDAWATCH_DETACH_DRAIN_MS"):
        DetachDrain()
    with pytest.raises(ValueError, match=">= 0"):
        DetachDrain(-1.0)


FAKE_CUPTI = '''
"""Stand-in for cupti-python's ``cupti`` module: kernels 'finish' at given wall times; a forced
flush returns unfinished ones without timestamps (start = end = 0), as CUPTI does."""
import time, types

calls = []
state = {"completed": None, "queue": []}   # queue: wall times at which launched kernels finish

class _E:
    def __init__(self, *names):
        for i, n in enumerate(names):
            setattr(self, n, i)

ActivityKind = _E("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "OVERHEAD")
ActivityOverheadKind = _E("CUPTI_INSTRUMENTATION", "CUPTI_RESOURCE", "COMMAND_BUFFER_FULL")
ActivityAttribute = _E("ATTR_DEVICE_BUFFER_SIZE", "ATTR_DEVICE_BUFFER_POOL_LIMIT")
Result = _E("SUCCESS", "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
class cuptiError(Exception):
    pass

def activity_register_callbacks(req, done): state["completed"] = done
def activity_set_attribute(*a): pass
def get_timestamp(): return time.time_ns()
def activity_enable(k): calls.append("enable")
def activity_disable(k): calls.append("disable")
def finalize(): calls.append("finalize")

def _record(t_done, now):
    ok = t_done <= now
    s = int(t_done * 1e9) - 1000 if ok else 0
    return types.SimpleNamespace(kind=ActivityKind.CONCURRENT_KERNEL, start=s, end=s + 1000 if ok else 0, name="k",
        grid_x=1, grid_y=1, grid_z=1, block_x=1, block_y=1, block_z=1, registers_per_thread=8,
        static_shared_memory=0, dynamic_shared_memory=0, device_id=0)

def activity_flush_all(flag):
    calls.append("flush_forced" if flag else "flush")
    if flag:
        now = time.time()
        recs, state["queue"] = [_record(t, now) for t in state["queue"]], []
        state["completed"](recs)
'''


@pytest.mark.parametrize("drain_ms, want_lost", [("0", 50), ("200", 0)])
def test_detach_waits_for_queued_kernels_before_the_forced_flush(tmp_path, drain_ms, want_lost):
    """50 kernels queued to finish 5-50 ms after the detach starts: without a wait all 50 come back
    without timestamps; with the wait (10, 20, 40, then 80 ms: three lossy detaches to grow past 50 ms)
    the fourth detach loses none, and the order is disable, unforced flush, wait, forced flush, finalize."""
    (tmp_path / "cupti").mkdir()
    (tmp_path / "cupti" / "__init__.py").write_text("")
    (tmp_path / "cupti" / "cupti.py").write_text(FAKE_CUPTI)
    code = textwrap.dedent("""
        import time
        from cupti import cupti
        from collector.aggregate import Aggregator
        from collector.tracer import CuptiTracer
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        lost = []
        for _ in range(4):
            t.attach()
            cupti.calls.clear()
            now = time.time()
            cupti.state["queue"] = [now + 0.001 * (5 + 45 * i / 49) for i in range(50)]
            z0 = agg.invalid_zero_ts
            t.detach()
            lost.append(agg.invalid_zero_ts - z0)
        print(lost[-1], ",".join(cupti.calls))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", CUDAWATCH_DETACH_DRAIN_MS=drain_ms)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert p.returncode == 0, p.stderr
    lost, calls = p.stdout.split()
    assert int(lost) == want_lost
    assert calls.split(",") == ["disable"] * 4 + ["flush", "flush_forced", "finalize"]
