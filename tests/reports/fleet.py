"""A small, real warehouse for report and alert tests: shards written with ``shards.write_shard``
and loaded with ``store.ingest_shards`` (no mocks of our own system).

Two hosts x 2 GPUs, two jobs, 30 hours from 2026-11-01 00:00 UTC. Job ``train`` has a GEMM that is
20 % slower from hour 20 and a kernel with a hostile name; GPU host-b:1 is thermally throttled
from hour 22; host-b wrote no device shard in hour 10; one unreadable shard sits in hour 5.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa

from analytics import store
from analytics.results import Finding, Regression
from cudawatch import shards

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
HOURS = 30
ONSET_H = 20
EVIL = "<script>alert(1)</script> <!channel>"
GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
HOSTS = ("host-a", "host-b")


def _kernel_rows(rng, host, gpu, hour):
    rows = []
    job = "train" if gpu == 0 else "infer"
    kernels = [(GEMM, 420_000.0, 900), ("at::native::vectorized_elementwise_kernel<4, float>", 35_000.0, 4000)]
    if job == "train":
        kernels.append((EVIL, 80_000.0, 300))
    for w in range(4):
        start = START + dt.timedelta(hours=hour, minutes=15 * w)
        for name, mean, launches in kernels:
            slow = 1.2 if (name == GEMM and job == "train" and hour >= ONSET_H) else 1.0
            m = mean * slow * (1 + rng.normal(0, 0.01))
            rows.append(dict(
                window_start=start, window_s=900, host=host, gpu_uuid=f"GPU-{host}-{gpu}", gpu_index=gpu, gpu_model="NVIDIA H100 80GB HBM3",
                job=job, run_id=f"{host}-{gpu}-run", pid=1000 + gpu, kernel=name, kernel_id=shards.kernel_id_of(name),
                grid_x=132, grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1, registers_per_thread=128, shared_mem_bytes=49152,
                launches=launches, total_ns=int(m * launches), min_ns=int(m * 0.9), max_ns=int(m * 1.2), sumsq_ns2=float(m * m * launches),
                hist_bucket=[shards.hist_bucket(m)], hist_count=[launches], sampling_duty=1.0,
            ))
    return rows


def _device_rows(rng, host, gpu, hour):
    rows = []
    for minute in range(0, 60, 5):
        ts = START + dt.timedelta(hours=hour, minutes=minute)
        throttled = host == "host-b" and gpu == 1 and hour >= 22
        util = (85 if gpu == 0 else 55) + 10 * np.sin(hour / 4) + rng.normal(0, 3)
        rows.append(dict(
            ts=ts, host=host, gpu_uuid=f"GPU-{host}-{gpu}", gpu_index=gpu, gpu_model="NVIDIA H100 80GB HBM3",
            sm_util_pct=float(np.clip(util, 0, 100)), sm_occupancy_pct=40.0, tensor_util_pct=30.0, dram_bw_util_pct=50.0,
            pcie_tx_bytes_s=1e9, pcie_rx_bytes_s=1e9, power_w=650.0 if not throttled else 500.0, temp_c=70.0 if not throttled else 91.0,
            sm_clock_mhz=1980.0 if not throttled else 1500.0, mem_clock_mhz=2619.0, clocks_event_reasons=0x40 if throttled else 0,
            mem_used_bytes=60 * 2**30,
        ))
    return rows


def _health_rows(host, gpu, hour):
    rows = []
    for w in range(4):
        dropped = 50 if (host == "host-a" and hour == 3) else 0
        lost = host == "host-b" and gpu == 1 and hour == 12 and w == 0  # records arrived, none valid
        valid = 0 if lost else 20000
        rows.append(dict(
            window_start=START + dt.timedelta(hours=hour, minutes=15 * w), window_s=900, host=host, job="train" if gpu == 0 else "infer",
            run_id=f"{host}-{gpu}-run", pid=1000 + gpu, records=valid, dropped_records=dropped,
            callback_s=1.2, overhead_pct=0.6 if hour != 3 else 2.4, sampling_duty=1.0, cupti_version="13.4",
            records_delivered=5000 if lost else valid, records_valid=valid, invalid_zero_timestamp=5000 if lost else 0,
            invalid_end_before_start=0, collector_errors=0, last_error=None,
            data_quality="error" if lost else ("degraded" if dropped else "ok"),
        ))
    return rows


def build_shards(root: Path, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    for hour in range(HOURS):
        h = START + dt.timedelta(hours=hour)
        for host in HOSTS:
            k, d, hl = [], [], []
            for gpu in (0, 1):
                k += _kernel_rows(rng, host, gpu, hour)
                d += _device_rows(rng, host, gpu, hour)
                hl += _health_rows(host, gpu, hour)
            shards.write_shard(root, "kernels", pa.Table.from_pylist(k), h, host=host, pid=1)
            if not (host == "host-b" and hour == 10):
                shards.write_shard(root, "device", pa.Table.from_pylist(d), h, host=host, pid=2)
            shards.write_shard(root, "health", pa.Table.from_pylist(hl), h, host=host, pid=3)
    bad = shards.partition_dir(root, "kernels", START + dt.timedelta(hours=5)) / "host-c-9-0123456789ab.parquet"
    bad.write_bytes(b"not parquet at all")
    return root


def build_warehouse(tmp: Path) -> Path:
    root = build_shards(tmp / "shards")
    db = tmp / "cudawatch.duckdb"
    con = store.connect(db)
    try:
        store.ingest_shards(root, con)
    finally:
        con.close()
    return db


def regressions() -> list[Regression]:
    """The events a detector would report on this fleet (constructed: the report must not depend
    on the detector's table being present)."""
    onset = START + dt.timedelta(hours=ONSET_H)
    gemm = Regression(
        job="train", kernel=GEMM, kernel_id=shards.kernel_id_of(GEMM), gpu_uuid=None, series="kernel_mean_ns", onset=onset,
        before=420_000.0, after=504_000.0, magnitude_pct=20.0, p_value=1e-9, severity="high", share_gpu_time=0.62,
        signature="132x1x1/256x1x1/r128/s49152", status="new", detected_at=onset + dt.timedelta(hours=3),
        causes=(
            Finding("kernel_slower_same_config", 0.8, {"mean_us_before": 420.0, "mean_us_after": 504.0, "launch_config": "unchanged"},
                    "Profile the kernel with Nsight Compute before and after the onset; check library versions."),
            Finding("gpu_clocks_throttled", 0.3, {"gpus": ["host-b:1"], "reason": "HW thermal"}, "Check cooling of host-b."),
        ),
    )
    evil = Regression(
        job="train", kernel=EVIL, kernel_id=shards.kernel_id_of(EVIL), gpu_uuid=None, series="kernel_launches", onset=START + dt.timedelta(hours=8),
        before=1200.0, after=1500.0, magnitude_pct=25.0, p_value=2e-4, severity="medium", share_gpu_time=0.05, status="ongoing",
        causes=(Finding("more_launches", 0.6, {"launches_before": 1200, "launches_after": 1500, "note": EVIL}, f"Look at {EVIL}"),),
    )
    clock = Regression(
        job="infer", kernel=None, kernel_id=None, gpu_uuid="GPU-host-b-1", series="gpu_sm_clock_mhz", onset=START + dt.timedelta(hours=22),
        before=1980.0, after=1500.0, magnitude_pct=-24.2, p_value=1e-12, severity="critical", status="new",
    )
    return [gemm, evil, clock]
