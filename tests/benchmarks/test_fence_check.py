"""benchmarks/fence_check.py's verdicts: a fence that only ran to its bound, or captures that
nothing could have failed, must not read as a working fence (the run itself needs a GPU)."""

from __future__ import annotations

import copy

from fence_check import verdicts

Q = 0.3  # seconds the 200 queued matmuls take alone


def _working() -> dict:
    capture = {"captures": 20, "failed": 0, "fence_errors": 0, "fences_during_captures": 40,
               "skipped_during_captures": 0, "gap_hits": 0}
    return {
        "before_init": {"waited_s": 0.0, "waits": 0},
        "queue_alone_s": Q,
        "legacy": {"waited_s": 0.29, "sync_after_s": 0.0001, "timeout": 0},
        "bound": {"waited_s": 0.021, "sync_after_s": 0.27, "timeout": 1},
        "nonblocking": {"waited_s": 0.0004, "sync_after_s": 0.29, "timeout": 0},
        "blocking": {"waited_s": 0.3, "sync_after_s": 0.0002, "timeout": 0},
        "capture_pool_stream": capture,
        "capture_blocking_stream": {**capture, "fences_during_captures": 0, "skipped_during_captures": 35},
        "control": {**capture, "failed": 20},
    }


def test_a_working_fence_passes_every_check():
    assert all(verdicts(_working()).values())


def test_a_fence_that_waited_to_its_bound_is_not_covered():
    res = _working()
    res["legacy"] = {"waited_s": 1.0, "sync_after_s": 0.0, "timeout": 1}
    assert verdicts(res)["legacy"] is False


def test_a_fence_that_returned_at_once_on_a_blocking_stream_is_not_covered():
    res = _working()
    res["blocking"] = {"waited_s": 0.0005, "sync_after_s": 0.29, "timeout": 0}
    assert verdicts(res)["blocking"] is False


def test_a_fence_thread_that_raised_fails_its_check():
    res = _working()
    res["legacy"] = {"error": "FenceError: cuEventRecord returned CUDA error 700", "sync_after_s": 0.0, "timeout": 0}
    assert verdicts(res)["legacy"] is False


def test_captures_with_no_fence_running_beside_them_prove_nothing():
    res = _working()
    res["capture_pool_stream"]["fences_during_captures"] = 0
    assert verdicts(res)["capture_pool_stream"] is False


def test_a_failed_capture_passes_only_where_a_record_hit_the_admitted_gap():
    res = _working()
    res["capture_blocking_stream"].update(failed=1)
    assert verdicts(res)["capture_blocking_stream"] is False
    res["capture_blocking_stream"].update(gap_hits=1)
    assert verdicts(res)["capture_blocking_stream"] is True


def test_a_control_whose_captures_all_succeed_fails_the_run():
    res = copy.deepcopy(_working())
    res["control"].update(failed=0, fence_errors=5)  # fence errors alone: no capture was broken
    assert verdicts(res)["control"] is False
