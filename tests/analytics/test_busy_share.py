"""``job_busy_share`` divides busy time by the GPU time the collectors observed (job_hourly's
``observed_gpu_s``), not by 3600 s per reporting GPU: a GPU watched for part of an hour is not a
fall of busy time, an idle window the collector saw is, and a window that lost its rows is not
observed. Real capture: tests/data/cupti/shards (30 s of an H200 training run)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from analytics import detect, store
from analytics.store import series as sr
from analytics.store.schema import ROLLUPS
from cudawatch import shards as sh

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
H = dt.timedelta(hours=1)
CUPTI = Path(__file__).resolve().parents[1] / "data" / "cupti" / "shards"
WIN = 600  # collector window (s): 6 a hour
BUSY = 0.5  # each GPU's kernels fill half of every window they ran in


def _job(root, hours, *, partial=(), idle=(), error=()):
    """Shards of one job on two GPUs (one process each), 600-s windows, kernels busy 50 % of every
    window. partial: hours in which GPU-1's collector ran only the last half (windows 3-5, kernel
    and health rows). idle: (hour, window) pairs where GPU-0 ran nothing but its collector wrote
    the health row. error: (hour, window) pairs of GPU-0 whose health row says data_quality
    'error' (records delivered, none valid: its kernel rows are lost)."""
    for h in range(hours):
        ts, krows, hrows = START + h * H, [], []
        for gpu in range(2):
            for w in range(3600 // WIN):
                if gpu == 1 and h in partial and w < 3:
                    continue
                start = ts + dt.timedelta(seconds=w * WIN)
                lost = gpu == 0 and (h, w) in error
                hrows.append(dict(window_start=start, window_s=WIN, host="h1", job="train", run_id=f"r{gpu}", pid=100 + gpu,
                                  records=0 if lost else 600, dropped_records=0, data_quality="error" if lost else "ok"))
                if lost or (gpu == 0 and (h, w) in idle):
                    continue
                n = 600
                mean = BUSY * WIN * 1e9 / n * (1 + 0.002 * (((h * 7 + w * 3 + gpu) % 5) - 2))
                krows.append(dict(window_start=start, window_s=WIN, host="h1", gpu_uuid=f"GPU-{gpu}", gpu_index=gpu,
                                  gpu_model="H200", job="train", run_id=f"r{gpu}", pid=100 + gpu, kernel="gemm",
                                  kernel_id=sh.kernel_id_of("gemm"), grid_x=128, grid_y=1, grid_z=1, block_x=256, block_y=1,
                                  block_z=1, registers_per_thread=32, shared_mem_bytes=0, launches=n, total_ns=int(mean * n),
                                  min_ns=int(mean * 0.9), max_ns=int(mean * 1.1), sumsq_ns2=mean * mean * n, sampling_duty=1.0))
        sh.write_shard(root, "kernels", pa.Table.from_pylist(krows), ts, host="h1", pid=1)
        sh.write_shard(root, "health", pa.Table.from_pylist(hrows), ts, host="h1", pid=1)


def _warehouse(tmp_path, **kw):
    _job(tmp_path / "shards", 120, **kw)
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "shards", con)
    return con


def _busy_share(con, end=START + 119 * H, hours=120, job="train"):
    mat = sr.load_matrix(con, sr.SPEC_BY_NAME["job_busy_share"], end, hours)
    assert [k[0] for k in mat.keys] == [job]
    return mat.values[0]


def test_the_real_capture_reads_its_busy_share_over_the_observed_seconds(tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(CUPTI, con)
    busy, gpus, observed = con.execute("SELECT gpu_busy_s, gpus, observed_gpu_s FROM job_hourly").fetchone()
    windows = con.execute("SELECT count(*), sum(window_s) FROM health").fetchone()
    # one GPU; its collector wrote 4 health windows of 10 s (one of them before any kernel row)
    assert gpus == 1 and windows == (4, 40) and observed == 40.0
    (value,) = _busy_share(con, dt.datetime(2026, 12, 2, 14, tzinfo=dt.timezone.utc), 1, "tinytrain")
    assert value == pytest.approx(busy / 40.0)
    assert 0.2 < value < 1.0  # per 3600 s per GPU it read 0.003


def test_a_gpu_observed_for_part_of_the_hour_is_not_a_fall(tmp_path):
    con = _warehouse(tmp_path, partial=set(range(100, 120)))
    values = _busy_share(con)
    assert values == pytest.approx([BUSY] * 120, rel=0.01)
    obs = dict(con.execute("SELECT hour, observed_gpu_s FROM job_hourly").fetchall())
    assert obs[START + 99 * H] == 7200 and obs[START + 100 * H] == 3600 + 1800
    raised = [r for h in range(100, 120) for r in detect.detect_regressions(con, START + h * H)
              if r.series in ("job_busy_share", "job_gpu_busy_s")]
    assert raised == []


def test_an_idle_window_the_collector_saw_is_busy_time_lost_and_a_lost_window_is_not(tmp_path):
    con = _warehouse(tmp_path, idle={(50, 2)}, error={(60, 4)})
    values = _busy_share(con)
    assert values[50] == pytest.approx(BUSY * 11 / 12, rel=0.01)  # 11 of the 12 observed windows ran kernels
    assert values[60] == pytest.approx(BUSY, rel=0.01)  # the lost window is neither busy nor observed
    assert values[49] == pytest.approx(BUSY, rel=0.01)


def test_a_warehouse_with_the_old_job_hourly_is_rebuilt(tmp_path):
    con = _warehouse(tmp_path, partial={110})
    expected = sorted(con.execute("SELECT * FROM job_hourly").fetchall())
    con.execute("DROP TABLE job_hourly")  # the layout before observed time: no observed_gpu_s
    con.execute("CREATE TABLE job_hourly AS SELECT hour, job, gpu_busy_s, launches, gpus, kernels FROM ("
                + ROLLUPS["job_hourly"][2].format(where="") + ")")
    con.close()
    ro = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    assert "observed_gpu_s" not in [r[0] for r in ro.execute("DESCRIBE job_hourly").fetchall()]
    ro.close()
    con = store.connect(tmp_path / "w.duckdb")
    assert sorted(con.execute("SELECT * FROM job_hourly").fetchall()) == expected
    assert _busy_share(con)[110] == pytest.approx(BUSY, rel=0.01)


def test_a_read_only_open_of_the_old_job_hourly_says_to_migrate(tmp_path):
    """A reader cannot migrate; it must not query a rollup without observed_gpu_s (reviewer's
    finding: job_busy_share raised a BinderException there). One clear error instead, and the CLI
    exits 2 with one line; a writable open then migrates."""
    from typer.testing import CliRunner

    from app.cli import app

    con = _warehouse(tmp_path, partial={110})
    con.execute("DROP TABLE job_hourly")
    con.execute("CREATE TABLE job_hourly AS SELECT hour, job, gpu_busy_s, launches, gpus, kernels FROM ("
                + ROLLUPS["job_hourly"][2].format(where="") + ")")
    con.close()
    db = tmp_path / "w.duckdb"
    with pytest.raises(store.WarehouseOutdated, match="job_hourly columns"):
        store.connect(db, read_only=True)
    res = CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 2 and "open it writable once" in res.output
    store.connect(db).close()
    store.connect(db, read_only=True).close()
