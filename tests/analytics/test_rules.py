"""Root-cause rules on hand-built contexts: one positive and one negative case per rule."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from analytics import rules
from analytics.context import (DeviceStats, KernelStats, MemcpyStats, RegressionContext, Window, THROTTLE_MASK,
                               reason_names)
from analytics.results import Finding, Regression

ONSET = dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc)
H = 24
GPUS = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")
CFG = (128, 1, 1, 256, 1, 1, 64, 0)
GEMM = "0000000000000aaa"
ELTW = "0000000000000bbb"


def kstats(kid=GEMM, name="ampere_sgemm_128x64_tn", sig="128x1x1/256x1x1/r64/s0", mean=100_000.0, rate=3600.0,
           hours=H, jitter=0.01, config=CFG):
    """A kernel signature that ran ``hours`` hours at ``rate`` launches/h with per-launch ``mean`` ns."""
    means = tuple(mean * (1 + jitter * ((i % 5) - 2) / 2) for i in range(hours))
    launches = tuple(rate * (1 + jitter * ((i % 3) - 1)) for i in range(hours))
    return KernelStats(kid, name, sig, sum(launches), sum(m * n for m, n in zip(means, launches)), means, launches,
                       config, tuple(range(hours)))


def dev(g="GPU-0", clock=1980.0, throttle=0.0, reasons=0, sm=70.0, dram=40.0, pcie=2e9, model="NVIDIA H100 80GB HBM3"):
    return DeviceStats(g, 3600 * H, sm_clock_mhz=clock, sm_util_pct=sm, dram_bw_util_pct=dram, pcie_bytes_s=pcie,
                       power_w=500.0, temp_c=60.0, throttle_frac=throttle, reasons=reasons, gpu_model=model)


def gpu_kernels(means: dict[str, float], kid=GEMM, launches=3600.0 * H):
    return {(g, kid): (launches, launches * m) for g, m in means.items()}


def window(start, kernels=(), memcpy=(), devices=None, gpu_k=None, wall=None, busy=None, other=0.0, other_jobs=0, hours=H,
           hourly=None):
    kernels = tuple(kernels)
    busy_s = sum(k.total_ns for k in kernels) / 1e9 if busy is None else busy
    return Window(start, start + dt.timedelta(hours=hours), hours, (), kernels, tuple(memcpy),
                  devices if devices is not None else {g: dev(g) for g in GPUS},
                  gpu_k if gpu_k is not None else gpu_kernels({g: 100_000.0 for g in GPUS}),
                  busy_s, wall if wall is not None else 3600.0 * H * len(GPUS), other, other_jobs, **(hourly or {}))


def ctx(before_kw=None, after_kw=None, *, series="kernel_mean_ns", kernel_id=GEMM, gpu=None, signature=None):
    reg = Regression(job="train-llama", kernel="ampere_sgemm" if kernel_id else None, kernel_id=kernel_id, gpu_uuid=gpu,
                     series=series, onset=ONSET, before=1.0, after=1.1, magnitude_pct=10.0, p_value=1e-6,
                     severity="medium", signature=signature)
    b = window(ONSET - dt.timedelta(hours=H), **(before_kw or {"kernels": [kstats()]}))
    a = window(ONSET, **(after_kw or {"kernels": [kstats()]}))
    return RegressionContext(reg, b, a)


def fired(c) -> list[str]:
    return [f.rule for f in rules.evaluate(c)]


# --- vocabulary and plumbing ---------------------------------------------------------------------

def test_vocabulary_is_fixed_and_ordered():
    assert rules.RULES == ("kernel_slower", "launch_config_changed", "new_kernel", "kernel_vanished", "more_launches",
                           "pageable_memcpy", "memcpy_throughput_drop", "clock_throttle", "straggler_gpu",
                           "gpu_idle_gaps", "contention", "compute_bound", "memory_bound", "transfer_bound")


def test_nvml_reason_bits_match_nvidia_ml_py():
    pynvml = pytest.importorskip("pynvml")
    assert THROTTLE_MASK == (pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
                             | pynvml.nvmlClocksEventReasonSwThermalSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
                             | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    assert reason_names(pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSwPowerCap) == ["sw_power_cap"]


def test_unchanged_job_claims_no_cause():
    assert fired(ctx()) == []
    assert fired(ctx(series="job_gpu_busy_s", kernel_id=None)) == []


def test_a_failing_rule_is_skipped_not_fatal():
    def broken(_):
        raise RuntimeError("boom")

    c = ctx(after_kw={"kernels": [kstats(mean=110_000.0)]})
    assert [f.rule for f in rules.evaluate(c, (broken, rules.kernel_slower))] == ["kernel_slower"]


# --- kernel rules --------------------------------------------------------------------------------

def test_kernel_slower_positive():
    f = rules.kernel_slower(ctx(after_kw={"kernels": [kstats(mean=108_000.0)]}))
    assert f.rule == "kernel_slower" and f.evidence["change_pct"] == pytest.approx(8.0, abs=0.1)
    assert f.evidence["mean_ns_before"] == pytest.approx(100_000.0) and f.recommendation


def test_kernel_slower_negative_within_noise_and_other_kernel():
    # 2.5 % is below the 3 % floor (day-scale drift); a noisy 5 % step is within the hourly noise
    assert rules.kernel_slower(ctx(after_kw={"kernels": [kstats(mean=102_500.0)]})) is None
    noisy = ctx({"kernels": [kstats(jitter=0.1)]}, {"kernels": [kstats(mean=105_000.0, jitter=0.1)]})
    assert rules.kernel_slower(noisy) is None
    assert rules.kernel_slower(ctx({"kernels": [kstats(jitter=0.1)]}, {"kernels": [kstats(mean=125_000.0, jitter=0.1)]}))
    # a GPU counter regression is not blamed on a kernel of the job
    assert rules.kernel_slower(ctx(after_kw={"kernels": [kstats(mean=108_000.0)]}, series="gpu_sm_clock_mhz",
                                   kernel_id=None, gpu="GPU-0")) is None
    other = ctx(after_kw={"kernels": [kstats(mean=150_000.0)]}, kernel_id=ELTW)
    assert rules.kernel_slower(other) is None


def test_launch_config_changed_positive():
    new = kstats(sig="256x1x1/128x1x1/r96/s0", config=(256, 1, 1, 128, 1, 1, 96, 0), mean=120_000.0)
    f = rules.launch_config_changed(ctx(after_kw={"kernels": [new]}))
    assert f.evidence["changed"] == {"grid_x": [128, 256], "block_x": [256, 128], "registers_per_thread": [64, 96]}
    assert f.evidence["signature_before"] == "128x1x1/256x1x1/r64/s0" and f.confidence >= 0.8
    assert rules.kernel_slower(ctx(after_kw={"kernels": [new]})) is None  # different signature: not "same config"


def test_launch_config_changed_negative_steady_multi_config_kernel():
    # real elementwise kernels run with several grids at once; both before and after: no change
    two = [kstats(), kstats(sig="64x1x1/256x1x1/r64/s0", config=(64, 1, 1, 256, 1, 1, 64, 0))]
    assert rules.launch_config_changed(ctx({"kernels": two}, {"kernels": two})) is None
    # a new configuration added beside the old one that keeps running is not a change of configuration
    assert rules.launch_config_changed(ctx({"kernels": two[:1]}, {"kernels": two})) is None


def test_new_kernel_positive_job_scope():
    added = kstats(kid=ELTW, name="vectorized_elementwise_kernel<add>", mean=50_000.0)
    f = rules.new_kernel(ctx(after_kw={"kernels": [kstats(), added]}, series="job_gpu_busy_s", kernel_id=None))
    assert f.evidence["kernels"][0]["kernel_id"] == ELTW and f.evidence["count"] == 1
    assert f.confidence >= 0.8  # the new kernel explains all of the job's added GPU time


def test_new_kernel_negative_tiny_share_or_job_just_started():
    tiny = kstats(kid=ELTW, mean=100.0, rate=10.0)
    assert rules.new_kernel(ctx(after_kw={"kernels": [kstats(), tiny]}, series="job_gpu_busy_s", kernel_id=None)) is None
    added = kstats(kid=ELTW, mean=50_000.0)
    just_started = ctx({"kernels": [], "hours": 0}, {"kernels": [kstats(), added]}, series="job_gpu_busy_s", kernel_id=None)
    assert rules.new_kernel(just_started) is None


def test_kernel_vanished_positive():
    gone = kstats(kid=ELTW, name="fused_layernorm", mean=50_000.0)
    f = rules.kernel_vanished(ctx({"kernels": [kstats(), gone]}, series="job_gpu_busy_s", kernel_id=None))
    assert f.evidence["kernels"][0]["kernel"] == "fused_layernorm"
    own = rules.kernel_vanished(ctx({"kernels": [kstats(), gone]}, {"kernels": [kstats()]}, series="kernel_launches", kernel_id=ELTW))
    assert own.confidence == pytest.approx(0.85)


def test_kernel_vanished_own_kernel_counts_whatever_its_share():
    tiny = kstats(kid=ELTW, name="ncclDevKernel_AllReduce_Sum", mean=100.0, rate=10.0)
    assert rules.kernel_vanished(ctx({"kernels": [kstats(), tiny]}, series="job_gpu_busy_s", kernel_id=None)) is None
    own = rules.kernel_vanished(ctx({"kernels": [kstats(), tiny]}, series="kernel_launches", kernel_id=ELTW))
    assert own.evidence["kernels"][0]["kernel"] == "ncclDevKernel_AllReduce_Sum"


def test_kernel_vanished_negative_sporadic_kernel():
    sporadic = kstats(kid=ELTW, mean=50_000.0, hours=2)  # ran only 2 hours before onset
    assert rules.kernel_vanished(ctx({"kernels": [kstats(), sporadic]}, series="job_gpu_busy_s", kernel_id=None)) is None


def test_more_launches_positive():
    eltw = kstats(kid=ELTW, name="elementwise_add", mean=5_000.0, rate=1800.0)
    eltw_more = kstats(kid=ELTW, name="elementwise_add", mean=5_000.0, rate=2700.0)
    f = rules.more_launches(ctx({"kernels": [kstats(), eltw]}, {"kernels": [kstats(), eltw_more]}, series="kernel_launches",
                                kernel_id=ELTW))
    assert f.evidence["launches_per_hour_after"] == pytest.approx(2700.0, rel=0.01)
    assert f.evidence["change_pct"] == pytest.approx(100 * ((2700 / 6300) / (1800 / 5400) - 1), abs=0.5)  # +28.6 %
    assert f.confidence == pytest.approx(0.8)


def test_more_launches_negative_small_or_load_driven():
    eltw = kstats(kid=ELTW, mean=5_000.0, rate=7200.0)
    small = ctx({"kernels": [kstats(), eltw]}, {"kernels": [kstats(), kstats(kid=ELTW, mean=5_000.0, rate=7350.0)]},
                series="kernel_launches", kernel_id=ELTW)
    assert rules.more_launches(small) is None  # +0.7 % of the job's launches
    # the whole job launches 40 % more (busier hours of an inference service): not more launches per unit of work
    busier = ctx({"kernels": [kstats(), eltw]}, {"kernels": [kstats(rate=5040.0), kstats(kid=ELTW, mean=5_000.0, rate=10080.0)]},
                 series="kernel_launches", kernel_id=ELTW)
    assert rules.more_launches(busier) is None


# --- copy rules ----------------------------------------------------------------------------------

def mstats(src="pinned", gbps=20.0, gb_per_hour=100.0, hours=H, jitter=0.02, kind="HtoD"):
    rates = tuple(gbps * (1 + jitter * ((i % 5) - 2) / 2) for i in range(hours))
    nbytes = gb_per_hour * 1e9 * hours
    return MemcpyStats(kind, src, "device", 1000.0 * hours, nbytes, nbytes / gbps, rates)


def test_pageable_memcpy_positive():
    c = ctx({"kernels": [kstats()], "memcpy": [mstats()]}, {"kernels": [kstats()], "memcpy": [mstats("pageable", gbps=6.0)]},
            series="job_gpu_busy_s", kernel_id=None)
    f = rules.pageable_memcpy(c)
    assert f.evidence["pageable_share_before"] == 0.0 and f.evidence["pageable_share_after"] == 1.0
    assert f.evidence["host_copy_bytes_per_ns_after"] == pytest.approx(6.0)


def test_pageable_memcpy_negative_already_pageable_or_device_copies():
    same = {"kernels": [kstats()], "memcpy": [mstats("pageable", gbps=6.0)]}
    assert rules.pageable_memcpy(ctx(same, same, series="job_gpu_busy_s", kernel_id=None)) is None
    dtod = {"kernels": [kstats()], "memcpy": [mstats("device", kind="DtoD")]}
    assert rules.pageable_memcpy(ctx(dtod, dtod)) is None


def test_memcpy_throughput_drop_positive():
    c = ctx({"kernels": [kstats()], "memcpy": [mstats()]}, {"kernels": [kstats()], "memcpy": [mstats(gbps=12.0)]})
    f = rules.memcpy_throughput_drop(c)
    assert f.evidence["change_pct"] == pytest.approx(-40.0, abs=0.5) and f.evidence["src_kind"] == "pinned"


def test_memcpy_throughput_drop_negative_small_drop():
    c = ctx({"kernels": [kstats()], "memcpy": [mstats()]}, {"kernels": [kstats()], "memcpy": [mstats(gbps=19.4)]})
    assert rules.memcpy_throughput_drop(c) is None  # -3 %
    noisy = ctx({"kernels": [kstats()], "memcpy": [mstats(jitter=0.3)]}, {"kernels": [kstats()], "memcpy": [mstats(gbps=18.0, jitter=0.3)]})
    assert rules.memcpy_throughput_drop(noisy) is None  # -10 % within the hourly noise


# --- GPU rules -----------------------------------------------------------------------------------

def throttled_devices(clock=1500.0, frac=0.9, reasons=0x40 | 0x1):
    return {g: dev(g, clock=clock, throttle=frac, reasons=reasons & THROTTLE_MASK) if g == "GPU-2" else dev(g) for g in GPUS}


def test_clock_throttle_positive_ranks_first():
    slow = gpu_kernels({"GPU-0": 100_000.0, "GPU-1": 100_000.0, "GPU-2": 125_000.0, "GPU-3": 100_000.0})
    c = ctx(after_kw={"kernels": [kstats(mean=106_000.0)], "devices": throttled_devices(), "gpu_k": slow})
    f = rules.clock_throttle(c)
    assert f.evidence["gpu_uuid"] == "GPU-2" and f.evidence["reasons"] == ["hw_thermal"]
    assert f.evidence["clock_change_pct"] == pytest.approx(-24.24, abs=0.01)
    assert fired(c)[:2] == ["clock_throttle", "straggler_gpu"] and "kernel_slower" in fired(c)


def test_clock_throttle_negative_no_reason_or_small_drop():
    no_reason = throttled_devices(frac=0.0, reasons=0x1)  # idle only: clocks fell because the GPU idled
    assert rules.clock_throttle(ctx(after_kw={"kernels": [kstats()], "devices": no_reason})) is None
    small = throttled_devices(clock=1940.0)  # -2 %, below the 3 % floor
    assert rules.clock_throttle(ctx(after_kw={"kernels": [kstats()], "devices": small})) is None


def test_straggler_gpu_positive():
    slow = gpu_kernels({"GPU-0": 100_000.0, "GPU-1": 101_000.0, "GPU-2": 115_000.0, "GPU-3": 99_000.0})
    f = rules.straggler_gpu(ctx(after_kw={"kernels": [kstats()], "gpu_k": slow}))
    assert f.evidence["gpu_uuid"] == "GPU-2" and f.evidence["slower_than_peers_pct_after"] == pytest.approx(15.0, abs=0.1)


def test_straggler_gpu_negative_already_slow_or_all_slower():
    slow = gpu_kernels({"GPU-0": 100_000.0, "GPU-1": 101_000.0, "GPU-2": 115_000.0, "GPU-3": 99_000.0})
    assert rules.straggler_gpu(ctx({"kernels": [kstats()], "gpu_k": slow}, {"kernels": [kstats()], "gpu_k": slow})) is None
    all_slow = gpu_kernels({g: 115_000.0 for g in GPUS})
    assert rules.straggler_gpu(ctx(after_kw={"kernels": [kstats()], "gpu_k": all_slow})) is None


def test_gpu_idle_gaps_positive():
    busy = 7.2e7  # launches/h of 100 us on 4 GPUs: busy half the time
    c = ctx({"kernels": [kstats(rate=busy)]}, {"kernels": [kstats(rate=0.75 * busy)]}, series="job_gpu_busy_s", kernel_id=None)
    f = rules.gpu_idle_gaps(c)
    assert f.evidence["busy_share_before"] == pytest.approx(0.5, abs=0.01)
    assert f.evidence["busy_share_after"] == pytest.approx(0.375, abs=0.01)


def test_gpu_idle_gaps_negative_faster_kernels_or_shorter_wall():
    busy = 7.2e7
    faster = ctx({"kernels": [kstats(rate=busy)]}, {"kernels": [kstats(rate=busy, mean=70_000.0)]}, series="job_gpu_busy_s", kernel_id=None)
    assert rules.gpu_idle_gaps(faster) is None  # same launch rate: kernels got faster, the GPU is not idle
    half_wall = ctx({"kernels": [kstats(rate=busy)]}, {"kernels": [kstats(rate=busy / 2)], "wall": 3600.0 * H * 2},
                    series="job_gpu_busy_s", kernel_id=None)
    assert rules.gpu_idle_gaps(half_wall) is None  # the job ran on fewer GPUs, busy share unchanged


def diurnal_window(start, hours, load, busy_share=0.6, gpus=4):
    """Hourly busy/wall/launches of a job whose launches follow ``load(hour of day)``; the busy share moves with it."""
    hrs = [start + dt.timedelta(hours=i) for i in range(hours)]
    wall = {h: 3600.0 * gpus for h in hrs}
    busy = {h: 3600.0 * gpus * busy_share * load(h.hour) for h in hrs}
    launches = {h: 1e6 * load(h.hour) for h in hrs}
    return dict(wall=sum(wall.values()), busy=sum(busy.values()), hours=hours, hourly_wall_s=wall, hourly_busy_s=busy,
                hourly_launches=launches)


def test_gpu_idle_gaps_compares_same_hours_of_day():
    load = lambda hour: 0.5 + 0.5 * (8 <= hour < 20)  # noqa: E731 - busy by day, half as busy at night
    b = diurnal_window(ONSET - dt.timedelta(hours=H), H, load)
    night = diurnal_window(ONSET, 6, load)  # the onset is midnight: six night hours after it
    kw = {"kernels": [kstats(rate=1e6)]}

    def with_hourly(window_kw):
        return dict(kw, wall=window_kw["wall"], busy=window_kw["busy"], hours=window_kw["hours"],
                    hourly={k: window_kw[k] for k in ("hourly_wall_s", "hourly_busy_s", "hourly_launches")})

    c = ctx(with_hourly(b), with_hourly(night), series="job_gpu_busy_s", kernel_id=None)
    assert rules.gpu_idle_gaps(c) is None  # quieter night hours, as quiet as the night before
    slow = diurnal_window(ONSET, 6, lambda hour: 0.7 * load(hour))
    f = rules.gpu_idle_gaps(ctx(with_hourly(b), with_hourly(slow), series="job_gpu_busy_s", kernel_id=None))
    assert f.evidence["same_hour_pairs"] == 6 and f.evidence["busy_share_after"] == pytest.approx(0.7 * f.evidence["busy_share_before"])


def test_contention_positive():
    wall = 3600.0 * H * len(GPUS)
    f = rules.contention(ctx(after_kw={"kernels": [kstats()], "other": 0.2 * wall, "other_jobs": 1}))
    assert f.evidence["other_busy_share_after"] == pytest.approx(0.2) and f.evidence["other_jobs_after"] == 1


def test_contention_on_one_gpu_names_that_gpu():
    wall = 3600.0 * H
    per_gpu = {g: wall for g in GPUS}
    before = {"kernels": [kstats()], "gpu_wall_s": per_gpu}
    after = {"kernels": [kstats()], "other": 0.2 * wall * 4, "other_jobs": 1, "gpu_wall_s": per_gpu,
             "gpu_other_busy_s": {"GPU-2": 0.8 * wall}}
    f = rules.contention(ctx(_with(before), _with(after)))
    assert f.evidence["gpu_uuid"] == "GPU-2"
    assert f.evidence["gpu_other_busy_share_before"] == 0 and f.evidence["gpu_other_busy_share_after"] == pytest.approx(0.8)
    from reports.evidence import sentence
    text = sentence(f, ctx().regression, gpu_labels={"GPU-2": "node1:2"})
    assert "on GPU node1:2: 80" in text, text
    # spread over all four GPUs: no single GPU is named (the job and the cause group it)
    spread = dict(after, gpu_other_busy_s={g: 0.2 * wall for g in GPUS})
    f = rules.contention(ctx(_with(before), _with(spread)))
    assert f is not None and "gpu_uuid" not in f.evidence
    assert "on GPU" not in sentence(f, ctx().regression)


def _with(kw):
    """window() keywords plus Window fields it does not take (per-GPU wall and other-job time)."""
    extra = {k: kw.pop(k) for k in ("gpu_wall_s", "gpu_other_busy_s") if k in kw}
    return {**kw, "hourly": extra}


def test_contention_negative_same_neighbours():
    wall = 3600.0 * H * len(GPUS)
    same = {"kernels": [kstats()], "other": 0.2 * wall, "other_jobs": 1}
    assert rules.contention(ctx(same, same)) is None


# --- regime rules --------------------------------------------------------------------------------

def devices(**kw):
    return {g: dev(g, **kw) for g in GPUS}


def test_compute_bound_positive_and_ranks_below_specific_causes():
    c = ctx({"kernels": [kstats()], "devices": devices(sm=75.0, dram=30.0)},
            {"kernels": [kstats(mean=110_000.0)], "devices": devices(sm=97.0, dram=30.0)})
    assert rules.compute_bound(c).confidence <= 0.35
    assert fired(c) == ["kernel_slower", "compute_bound"]


def test_compute_bound_negative_unchanged_or_memory_heavy():
    busy = {"kernels": [kstats()], "devices": devices(sm=97.0, dram=30.0)}
    assert rules.compute_bound(ctx(busy, busy)) is None  # the regime did not change at onset
    crossed = ctx({"kernels": [kstats()], "devices": devices(sm=89.7)}, {"kernels": [kstats()], "devices": devices(sm=90.1)})
    assert rules.compute_bound(crossed) is None  # crossing the line by noise is not entering the regime
    heavy = {"kernels": [kstats()], "devices": devices(sm=97.0, dram=80.0)}
    assert rules.compute_bound(ctx({"kernels": [kstats()], "devices": devices(sm=70.0)}, heavy)) is None


def test_memory_bound_positive_and_negative():
    f = rules.memory_bound(ctx({"kernels": [kstats()], "devices": devices(dram=45.0)}, {"kernels": [kstats()], "devices": devices(dram=82.0)}))
    assert f.evidence["dram_bw_util_pct_after"] == pytest.approx(82.0)
    assert rules.memory_bound(ctx({"kernels": [kstats()], "devices": devices(dram=75.0)}, {"kernels": [kstats()], "devices": devices(dram=78.0)})) is None
    assert rules.memory_bound(ctx({"kernels": [kstats()], "devices": devices(dram=30.0)}, {"kernels": [kstats()], "devices": devices(dram=55.0)})) is None


def test_transfer_bound_positive_and_negative():
    small = mstats(gb_per_hour=1.0)
    big = mstats(gb_per_hour=3000.0)  # 150 s of copies per hour against ~346 s of kernels
    f = rules.transfer_bound(ctx({"kernels": [kstats()], "memcpy": [small]}, {"kernels": [kstats()], "memcpy": [big]}))
    assert f.evidence["copy_share_after"] > 0.2 and f.confidence <= 0.35
    assert rules.transfer_bound(ctx({"kernels": [kstats()], "memcpy": [big]}, {"kernels": [kstats()], "memcpy": [big]})) is None
    link = ctx({"kernels": [kstats()], "devices": devices(pcie=10e9)}, {"kernels": [kstats()], "devices": devices(pcie=50e9)})
    assert rules.transfer_bound(link).evidence["pcie_pct_of_peak_after"] == pytest.approx(78.125, abs=0.01)


def test_evaluate_ranks_by_confidence():
    new = kstats(sig="256x1x1/128x1x1/r96/s0", config=(256, 1, 1, 128, 1, 1, 96, 0), mean=120_000.0)
    c = ctx(after_kw={"kernels": [new], "devices": devices(sm=70.0, dram=85.0)})
    found = rules.evaluate(c)
    assert [f.rule for f in found] == ["launch_config_changed", "memory_bound"]
    assert all(isinstance(f, Finding) for f in found) and found[0].confidence > found[1].confidence
    assert dataclasses.replace(c.regression, causes=found).top_cause.rule == "launch_config_changed"
