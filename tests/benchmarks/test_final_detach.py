"""benchmarks/final_detach.py: the marker kernel's launches are counted out of real kernel shards."""

import json
from pathlib import Path

import pyarrow as pa

import final_detach
from cudawatch import shards as sh

from ..test_shards import HOUR, kernel_rows


def test_marker_launches_sum_every_window_and_process_of_the_marker_only(tmp_path):
    xor = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<short, short, short, at::native::BitwiseXorFunctor<short>>>(int, T2, T3)"
    first = kernel_rows(2, kernel=xor, launches=100)  # two processes: 100 + 101
    other = kernel_rows(1, kernel="void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()", launches=7)
    sh.write_shard(tmp_path, "kernels", pa.concat_tables([first, other]), HOUR, host="h0", pid=42)
    later = kernel_rows(1, kernel=xor, launches=5, window_start=HOUR.replace(minute=10))
    sh.write_shard(tmp_path, "kernels", later, HOUR, host="h0", pid=43)
    assert final_detach.marker_launches(tmp_path) == {xor: 206}
    assert final_detach.marker_launches(tmp_path / "nothing") == {}


def _obs(**over):
    obs = {"queue_s": 1.0, "burst": 500, "pre": 1000, "marker_kernels": {"BitwiseXorFunctor<short>": 1480},
           "attached_at_stop": True, "spin_running_at_stop": True, "detaches_before_burst": 1, "detaches_after_stop": 2}
    return {**obs, **over}


def test_summary_counts_the_missing_marker_launches_and_keeps_every_observation():
    res = final_detach.summarize(_obs())
    assert (res["marker_traced"], res["marker_expected"], res["marker_missing"], res["valid_run"]) == (1480, 1500, 20, True)
    assert set(_obs()) <= set(res)


def test_a_run_that_did_not_stop_what_it_meant_to_is_not_valid():
    for over in ({"marker_kernels": {}}, {"attached_at_stop": False}, {"spin_running_at_stop": False},
                 {"detaches_after_stop": 3}):  # a cycle detached between the burst and the stop
        assert final_detach.summarize(_obs(**over))["valid_run"] is False, over


# §21 (docs/benchmarks.md): the first run on a GPU (H100), with the last detach not yet fenced.
S21 = Path(__file__).resolve().parents[1] / "data" / "cupti" / "bench" / "session_20261207f_h100"


def test_the_h100_run_without_a_final_fence_lost_every_queued_record_and_counted_them():
    res = final_detach.summarize(json.loads((S21 / "final_detach.json").read_text()))  # recomputed from the observations
    assert res["valid_run"] is True and res["burst_launch_s"] < 0.1 * res["queue_s"]  # no launch blocked
    assert (res["marker_traced"], res["marker_missing"]) == (1000, 500)  # the pre launches only
    assert res["invalid_zero_timestamp"] == res["drain"]["lost"] == res["burst"] + 1  # the burst and the spin kernel
    assert res["stop_s"] > res["queue_s"]  # the stop took longer than the queue all the same (which step waited: not timed)


def test_the_h100_run_with_the_final_fence_kept_every_queued_record_at_no_cost_to_the_stop():
    unfenced = json.loads((S21 / "final_detach.json").read_text())
    fenced = json.loads((S21 / "final_fence.json").read_text())
    res = final_detach.summarize(fenced)
    assert res["valid_run"] is True and (res["marker_traced"], res["marker_missing"]) == (1500, 0)
    assert res["invalid_zero_timestamp"] == res["drain"]["lost"] == 0
    fence = res["drain"]["fence"]
    assert fence["final"] == 1 and fence["timeouts"] == 0 and 0.9 < res["drain"]["last_waited_s"] < res["queue_s"]
    assert abs(res["stop_s"] - unfenced["stop_s"]) < 0.05  # the stop took as long without the fence
