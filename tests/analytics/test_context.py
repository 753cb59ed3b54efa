"""Loading a regression's context from a real warehouse (Parquet shards -> DuckDB), and attach_causes."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from analytics import explain, rules, store
from analytics.store import regressions
from analytics.store.context import load_context
from analytics.results import Regression
from cudawatch import shards as sh

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
HOURS = 12
ONSET = START + dt.timedelta(hours=6)
WIN = 6  # hours of each context window
GPUS = ("GPU-aaaa", "GPU-bbbb")
GEMM = sh.kernel_id_of("_Z13gemm_kernelv")
NORM = sh.kernel_id_of("_Z11norm_kernelv")
SOFTMAX = sh.kernel_id_of("_Z14softmax_kernelv")
WINDOW_S = 600  # six 10-minute collector windows per hour
GEMM_N = 3_000_000  # gemm launches per window and GPU: about half of the GPU's time


def kernel_row(t, gpu, kernel_id, name, mean_ns, launches, job="train", pid=100, grid=128):
    return dict(window_start=t, window_s=WINDOW_S, host="node-0", gpu_uuid=gpu, gpu_index=GPUS.index(gpu), gpu_model="NVIDIA H100",
                job=job, run_id=f"run-{pid}", pid=pid, kernel=name, kernel_id=kernel_id, grid_x=grid, grid_y=1, grid_z=1,
                block_x=256, block_y=1, block_z=1, registers_per_thread=64, shared_mem_bytes=0, launches=launches,
                total_ns=int(mean_ns * launches), min_ns=int(mean_ns * 0.9), max_ns=int(mean_ns * 1.2),
                sampling_duty=1.0)


def build(root):
    """12 hours of a 2-GPU job 'train'. At hour 6: gemm 10 % slower (25 % on GPU-bbbb), norm vanishes,
    softmax appears, host copies move to pageable memory, GPU-bbbb throttles (HW thermal) and job
    'other' starts sharing GPU-bbbb."""
    for h in range(HOURS):
        hour = START + dt.timedelta(hours=h)
        after = h >= 6
        k, m, d, hl = [], [], [], []
        for w in range(6):
            t = hour + dt.timedelta(minutes=10 * w)
            for gpu in GPUS:
                pid = 100 + GPUS.index(gpu)
                gemm_ns = (125_000 if gpu == "GPU-bbbb" else 110_000) if after else 100_000
                k.append(kernel_row(t, gpu, GEMM, "gemm_kernel()", gemm_ns, GEMM_N, pid=pid))
                k.append(kernel_row(t, gpu, SOFTMAX if after else NORM, "softmax_kernel()" if after else "norm_kernel()",
                                    20_000, 500_000, pid=pid))
                m.append(dict(window_start=t, window_s=WINDOW_S, host="node-0", gpu_uuid=gpu, gpu_index=0, job="train",
                              run_id=f"run-{pid}", pid=pid, copy_kind="HtoD", src_kind="pageable" if after else "pinned",
                              dst_kind="device", count=100, bytes=100 * 2**20, total_ns=100 * 2**20 // (8 if after else 20),
                              sampling_duty=1.0))
                hl.append(dict(window_start=t, window_s=WINDOW_S, host="node-0", job="train", run_id=f"run-{pid}", pid=pid,
                               records=1000, dropped_records=5 if after else 0))
            if after:
                k.append(kernel_row(t, "GPU-bbbb", GEMM, "gemm_kernel()", 100_000, 1_000_000, job="other", pid=999))
            for gpu in GPUS:
                throttled = after and gpu == "GPU-bbbb"
                d.append(dict(ts=t, host="node-0", gpu_uuid=gpu, gpu_index=GPUS.index(gpu), gpu_model="NVIDIA H100",
                              sm_util_pct=80.0, dram_bw_util_pct=40.0, pcie_tx_bytes_s=1e9, pcie_rx_bytes_s=2e9,
                              sm_clock_mhz=1500.0 if throttled else 1980.0, power_w=600.0, temp_c=88.0 if throttled else 65.0,
                              clocks_event_reasons=(0x40 | 0x1) if throttled else 0x1))
        for table, rows in (("kernels", k), ("memcpy", m), ("device", d), ("health", hl)):
            sh.write_shard(root, table, pa.Table.from_pylist(rows), hour, host="node-0", pid=1)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ctx")
    build(tmp / "shards")
    c = store.connect(tmp / "w.duckdb")
    store.ingest_shards(tmp / "shards", c)
    yield c
    c.close()


def reg(series="kernel_mean_ns", kernel_id=GEMM, gpu=None, signature="128x1x1/256x1x1/r64/s0", job="train"):
    return Regression(job=job, kernel="gemm_kernel()" if kernel_id else None, kernel_id=kernel_id, gpu_uuid=gpu,
                      series=series, onset=ONSET, before=100_000.0, after=110_000.0, magnitude_pct=10.0, p_value=1e-9,
                      severity="medium", signature=signature if kernel_id else None)


def test_windows_split_at_onset(con):
    ctx = load_context(con, reg(), hours=WIN)
    assert (ctx.before.start, ctx.before.end, ctx.after.start) == (ONSET - dt.timedelta(hours=WIN), ONSET, ONSET)
    assert (ctx.before.hours, ctx.after.hours) == (6, 6)
    assert ctx.before.series == pytest.approx((100_000.0,) * 6) and ctx.after.series == pytest.approx((117_500.0,) * 6)
    assert ctx.scope == "kernel"


def test_kernel_mix_and_per_gpu_numbers(con):
    ctx = load_context(con, reg(), hours=WIN)
    before = {k.kernel_id: k for k in ctx.before.kernels}
    after = {k.kernel_id: k for k in ctx.after.kernels}
    assert set(before) == {GEMM, NORM} and set(after) == {GEMM, SOFTMAX}
    gemm = after[GEMM]
    assert gemm.launches == 6 * 6 * 2 * GEMM_N and gemm.mean_ns == pytest.approx(117_500.0)
    assert gemm.hour_index == tuple(range(6)) and gemm.config == (128, 1, 1, 256, 1, 1, 64, 0)
    assert gemm.signature == "128x1x1/256x1x1/r64/s0"
    assert ctx.after.gpu_kernels[("GPU-aaaa", GEMM)] == (36 * GEMM_N, 36 * GEMM_N * 110_000.0)
    # wall: 2 GPUs x 6 windows x 600 s per hour; busy: gemm + softmax kernel time
    assert ctx.after.wall_s == 6 * 2 * 6 * WINDOW_S
    assert ctx.after.busy_s == pytest.approx(6 * 6 * (GEMM_N * (110e-6 + 125e-6) + 2 * 500_000 * 20e-6))
    assert ctx.before.dropped_records == 0 and ctx.after.dropped_records == 6 * 6 * 2 * 5


def test_memcpy_devices_and_neighbours(con):
    ctx = load_context(con, reg(), hours=WIN)
    (mb,), (ma,) = ctx.before.memcpy, ctx.after.memcpy
    assert (mb.host_kind, ma.host_kind) == ("pinned", "pageable")
    assert mb.bytes_per_ns == pytest.approx(20.0) and ma.bytes_per_ns == pytest.approx(8.0)
    b, a = ctx.before.devices["GPU-bbbb"], ctx.after.devices["GPU-bbbb"]
    assert (b.sm_clock_mhz, a.sm_clock_mhz) == (1980.0, 1500.0)
    assert (b.throttle_frac, a.throttle_frac, a.reasons) == (0.0, 1.0, 0x40)  # the idle bit is not throttling
    assert a.pcie_bytes_s == 2e9 and a.gpu_model == "NVIDIA H100"
    assert ctx.after.devices["GPU-aaaa"].throttle_frac == 0.0
    assert (ctx.before.other_jobs, ctx.after.other_jobs) == (0, 1)
    assert ctx.after.other_busy_s == pytest.approx(6 * 6 * 1_000_000 * 100e-6)


def test_gpu_regression_without_job_takes_the_busiest_job(con):
    ctx = load_context(con, reg(series="gpu_sm_clock_mhz", kernel_id=None, gpu="GPU-bbbb", job=""), hours=WIN)
    assert ctx.scope == "gpu" and ctx.after.series == pytest.approx((1500.0,) * 6)
    assert {k.kernel_id for k in ctx.after.kernels} == {GEMM, SOFTMAX}  # train's kernels, not other's


def test_windows_end_at_the_job_s_other_regressions(con):
    regressions.ensure_tables(con)
    other = [("e-later", "train", None, ONSET + dt.timedelta(hours=4)), ("e-gpu", "", "GPU-bbbb", ONSET - dt.timedelta(hours=5)),
             ("e-same", "train", None, ONSET + dt.timedelta(hours=1)), ("e-close", "train", None, ONSET - dt.timedelta(hours=1)),
             ("e-elsewhere", "serve", "GPU-zzzz", ONSET + dt.timedelta(hours=2))]
    con.executemany("INSERT INTO regressions (event_id, series, series_key, job, gpu_uuid, onset, status, detected_at, updated_at) "
                    "VALUES (?, 'job_gpu_busy_s', ?, ?, ?, ?, 'new', ?, ?)", [(e, e, j, g, o, o, o) for e, j, g, o in other])
    try:
        ctx = load_context(con, reg(), hours=WIN)
        # a later event of the job ends the after-window; a GPU event of its GPUs starts the before-window;
        # events within 2 h are the same change; other jobs' events do not count
        assert (ctx.before.start, ctx.after.end) == (ONSET - dt.timedelta(hours=5), ONSET + dt.timedelta(hours=4))
        assert (ctx.before.hours, ctx.after.hours) == (5, 4)
        unclipped = load_context(con, reg(), hours=WIN, clip=False)
        assert (unclipped.before.hours, unclipped.after.hours) == (6, 6)
    finally:
        con.execute("DELETE FROM regressions WHERE event_id IN (SELECT unnest(?::VARCHAR[]))", [[e for e, *_ in other]])


def test_bad_hours_is_a_clear_error(con):
    with pytest.raises(ValueError, match="hours must be >= 1"):
        load_context(con, reg(), hours=0)


def test_attach_causes_ranks_stores_and_is_idempotent(con):
    regs = [reg(), reg(series="gpu_sm_clock_mhz", kernel_id=None, gpu="GPU-bbbb")]
    out = explain.attach_causes(con, regs, hours=WIN)
    kernel_causes = [f.rule for f in out[0].causes]
    assert kernel_causes[0] == "clock_throttle"
    assert {"kernel_slower", "straggler_gpu", "contention"} <= set(kernel_causes) and "launch_config_changed" not in kernel_causes
    assert [f.confidence for f in out[0].causes] == sorted((f.confidence for f in out[0].causes), reverse=True)
    gpu_causes = [f.rule for f in out[1].causes]
    assert gpu_causes[0] == "clock_throttle"
    assert {"pageable_memcpy", "new_kernel", "kernel_vanished"} <= set(gpu_causes)
    assert out[0].causes and regs[0].causes == ()  # copies, inputs untouched
    rows = con.execute("SELECT event_id, rule, confidence, evidence FROM findings ORDER BY event_id, confidence DESC").fetchall()
    assert len(rows) == len(out[0].causes) + len(out[1].causes)
    ev = json.loads([r for r in rows if r[0] == out[0].event_id and r[1] == "clock_throttle"][0][3])
    assert ev["gpu_uuid"] == "GPU-bbbb" and ev["reasons"] == ["hw_thermal"] and ev["sm_clock_mhz_after"] == 1500.0
    again = explain.attach_causes(con, regs, hours=WIN)
    assert con.execute("SELECT count(*) FROM findings").fetchone()[0] == len(rows)
    assert [f.rule for f in again[0].causes] == kernel_causes


def test_a_context_that_fails_to_load_keeps_earlier_findings(con, monkeypatch):
    regs = [reg()]
    first = explain.attach_causes(con, regs, hours=WIN)
    stored = con.execute("SELECT count(*) FROM findings WHERE event_id = ?", [regs[0].event_id]).fetchone()[0]
    assert stored == len(first[0].causes) > 0

    def broken(*args, **kwargs):
        raise OSError("warehouse briefly unreadable")

    monkeypatch.setattr(explain, "load_context", broken)
    (again,) = explain.attach_causes(con, regs, hours=WIN)
    assert again.causes == ()
    assert con.execute("SELECT count(*) FROM findings WHERE event_id = ?", [regs[0].event_id]).fetchone()[0] == stored


def test_clean_job_gets_no_causes(tmp_path):
    root = tmp_path / "shards"
    for h in range(HOURS):
        hour = START + dt.timedelta(hours=h)
        rows = [kernel_row(hour + dt.timedelta(minutes=10 * w), g, GEMM, "gemm_kernel()", 100_000 * (1 + 0.003 * ((h * 7 + w) % 5 - 2)), GEMM_N,
                           pid=100 + i) for w in range(6) for i, g in enumerate(GPUS)]
        sh.write_shard(root, "kernels", pa.Table.from_pylist(rows), hour, host="node-0", pid=1)
    c = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(root, c)
    (out,) = explain.attach_causes(c, [reg()], hours=WIN)
    assert out.causes == ()
    assert c.execute("SELECT count(*) FROM findings").fetchone()[0] == 0


def test_cli_analyze_json_fills_causes_on_a_simulated_fleet(tmp_path):
    """End to end: simulator shards -> ingest -> `cudawatch analyze --json` names the injected cause first."""
    from typer.testing import CliRunner

    import simulator
    from app.cli import app

    simulator.simulate_fleet(tmp_path / "shards", gpus=4, hours=32, seed=3, start=START,
                             injections=simulator.parse_injections(["kind=kernel_slowdown,hour=27,pct=15"]))
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--shards", str(tmp_path / "shards"), "--db", str(tmp_path / "w.duckdb")]).exit_code == 0
    out = runner.invoke(app, ["analyze", "--db", str(tmp_path / "w.duckdb"), "--json"])
    assert out.exit_code == 0, out.output
    truth = json.loads((tmp_path / "shards" / "ground_truth.json").read_text())
    truth = truth.get("regressions", truth) if isinstance(truth, dict) else truth
    hits = [r for r in json.loads(out.output)["regressions"] if r["kernel_id"] == truth[0]["kernel_id"]]
    assert hits and hits[0]["causes"][0] == "kernel_slower"
    assert all(set(r["causes"]) <= set(rules.RULES) for r in json.loads(out.output)["regressions"])
