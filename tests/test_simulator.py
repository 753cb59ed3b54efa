"""Tests of the fleet simulator: determinism, the shard contract, consistency, and every injection kind.

Small fleets (4-8 GPUs, 6-20 hours) loaded into a real DuckDB warehouse with ``ingest_shards``.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from analytics import store
from cudawatch import shards
from simulator import CORE_KINDS, Injection, parse_injections, simulate_fleet
from simulator.injections import default_onsets

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _at(hour: int) -> dt.datetime:
    return START + dt.timedelta(hours=hour)


def _db(tmp_path_factory, name: str, **kwargs):
    root = tmp_path_factory.mktemp(name)
    truth = simulate_fleet(root / "shards", start=START, **kwargs)
    con = store.connect(root / "w.duckdb")
    store.ingest_shards(root / "shards", con)
    return truth, con, root / "shards"


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    truth, con, root = _db(tmp_path_factory, "default", gpus=8, hours=20, seed=3)
    yield truth, con, root
    con.close()


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    truth, con, root = _db(tmp_path_factory, "clean", gpus=8, hours=8, seed=5, injections=[])
    yield truth, con, root
    con.close()


def _truth(truth, kind: str) -> dict:
    (rec,) = [r for r in truth.regressions if r["kind"] == kind]
    return rec


def _onset_index(rec: dict) -> int:
    return int((dt.datetime.fromisoformat(rec["onset"]) - START).total_seconds() // 3600)


def _hourly(con, sql: str, params=()) -> dict[int, float]:
    """{hour index: value} from a query returning (hour, value)."""
    return {int((h - START).total_seconds() // 3600): v for h, v in con.execute(sql, list(params)).fetchall()}


def _ratio(series: dict[int, float], onset: int, until: int | None = None) -> float:
    before = [v for h, v in series.items() if h < onset]
    after = [v for h, v in series.items() if onset <= h < (until if until is not None else 10**6)]
    return float(np.median(after) / np.median(before))


# -- determinism and the contract ---------------------------------------------------------------

def _kernel_rows(root) -> pa.Table:
    t = pa.concat_tables([shards.read_shard(p) for p in shards.list_shards(root, "kernels")])
    return t.sort_by([("window_start", "ascending"), ("gpu_uuid", "ascending"), ("kernel_id", "ascending"),
                      ("grid_x", "ascending"), ("total_ns", "ascending")])


def test_same_seed_same_data_and_different_seed_differs(tmp_path):
    a = simulate_fleet(tmp_path / "a", gpus=4, hours=6, seed=11, start=START)
    b = simulate_fleet(tmp_path / "b", gpus=4, hours=6, seed=11, start=START)
    c = simulate_fleet(tmp_path / "c", gpus=4, hours=6, seed=12, start=START)
    assert a.regressions == b.regressions and a.rows == b.rows and a.shards == b.shards
    assert json.loads(a.path.read_text()) == json.loads(b.path.read_text())
    assert _kernel_rows(tmp_path / "a").equals(_kernel_rows(tmp_path / "b"))
    ja, jc = json.loads(a.path.read_text()), json.loads(c.path.read_text())
    assert ja["gpu_uuids"] != jc["gpu_uuids"]
    assert not _kernel_rows(tmp_path / "a").equals(_kernel_rows(tmp_path / "c"))


def test_every_shard_reads_and_one_shard_per_table_host_hour(default_run):
    truth, _, root = default_run
    paths = shards.list_shards(root)
    assert len(paths) == truth.shards == 4 * 1 * 20  # 4 tables x 1 host x 20 hours
    for p in paths:
        t = shards.read_shard(p)
        assert t.num_rows > 0
        assert set(t.column("host").to_pylist()) == {"gpu-node-000"}
    doc = json.loads(truth.path.read_text())
    assert doc["seed"] == 3 and doc["gpus"] == 8 and doc["hours"] == 20
    assert doc["start"] == START.isoformat()


def test_kernel_rows_are_internally_consistent(default_run):
    _, con, _ = default_run
    bad = con.execute("""
        SELECT count(*) FROM kernels
        WHERE NOT (min_ns <= total_ns / launches AND total_ns / launches <= max_ns)
           OR list_sum(hist_count) != launches
           OR sumsq_ns2 < total_ns::DOUBLE * total_ns / launches
           OR len(hist_bucket) != len(hist_count)
           OR floor(16 * log2(min_ns)) > hist_bucket[1] + 1
           OR floor(16 * log2(max_ns)) < hist_bucket[-1] - 1
    """).fetchone()[0]
    assert bad == 0
    # Real-looking names, stable ids, several launch configurations per elementwise kernel.
    names = {r[0] for r in con.execute("SELECT DISTINCT kernel FROM kernels").fetchall()}
    assert any(n.startswith("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") for n in names)
    assert any(n.startswith("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") for n in names)
    assert any(n.startswith("void flash_fwd_kernel<") for n in names)
    configs = con.execute("""SELECT min(n), max(n) FROM (SELECT job, kernel_id, count(DISTINCT (grid_x, block_x)) n
                             FROM kernels WHERE kernel LIKE 'void at::native::vectorized_elementwise_kernel%'
                                             OR kernel LIKE 'void at::native::reduce_kernel%' GROUP BY ALL)""").fetchone()
    assert configs == (2, 3)
    # Heavy tail: some windows' max is far above their mean.
    tail = con.execute("SELECT avg((max_ns > 2.5 * total_ns / launches)::INT) FROM kernels WHERE launches > 5000").fetchone()[0]
    assert tail > 0.3


def test_memcpy_throughput_and_device_counters_match_the_load(clean_run):
    _, con, _ = clean_run
    gbps = con.execute("""SELECT sum(bytes) / sum(total_ns) FROM memcpy
                          WHERE copy_kind = 'HtoD' AND src_kind = 'pinned' AND bytes / count > 1e6""").fetchone()[0]
    assert 20 <= gbps <= 25
    # sm_util of each GPU-hour tracks the kernel time on that GPU.
    rows = con.execute("""
        SELECT d.sm_util_pct, 100 * k.busy_ns / 3.6e12 FROM device_hourly d JOIN (
            SELECT date_trunc('hour', window_start) AS hour, gpu_uuid, sum(total_ns) AS busy_ns FROM kernels GROUP BY ALL
        ) k USING (hour, gpu_uuid)""").fetchall()
    assert len(rows) == 8 * 8
    assert max(abs(a - b) for a, b in rows) < 3.0
    assert con.execute("SELECT count(*) FROM device WHERE clocks_event_reasons != 0").fetchone()[0] == 0
    assert con.execute("SELECT min(sm_clock_mhz), max(sm_clock_mhz) FROM device").fetchone() == (1980.0, 1980.0)
    assert con.execute("SELECT count(*) / 8 / 8 FROM device").fetchone()[0] == 360  # 10 s samples
    # Health records count the activity records (kernel launches + copies) of each window and process.
    mismatch = con.execute("""
        SELECT count(*) FROM health h LEFT JOIN (
            SELECT window_start, run_id, pid, sum(n) AS n FROM (
                SELECT window_start, run_id, pid, launches AS n FROM kernels
                UNION ALL SELECT window_start, run_id, pid, count FROM memcpy)
            GROUP BY ALL) a USING (window_start, run_id, pid)
        WHERE h.records != a.n OR h.cupti_version != '13.4.92' OR h.sampling_duty != 1""").fetchone()[0]
    assert mismatch == 0


def test_clean_fleet_has_no_injections_and_realistic_noise(clean_run):
    truth, con, root = clean_run
    assert truth.regressions == []
    assert json.loads(truth.path.read_text())["regressions"] == []
    assert con.execute("SELECT count(*) FROM memcpy WHERE copy_kind = 'HtoD' AND src_kind = 'pageable'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM kernels WHERE kernel LIKE '%bitonicSortKVInPlace%'").fetchone()[0] == 0
    # Hour-to-hour movement of a kernel signature's hourly mean: around 0.5-3 %.
    moves = con.execute("""
        SELECT abs(mean_ns / lag(mean_ns) OVER (PARTITION BY job, kernel_id, signature ORDER BY hour) - 1)
        FROM kernel_hourly WHERE job LIKE 'train-%'""").fetchall()
    med = float(np.median([m[0] for m in moves if m[0] is not None]))
    assert 0.003 < med < 0.03
    # Outlier hours: a few percent of series-hours spike more than 8 % above the series' median.
    spikes = con.execute("""
        WITH s AS (SELECT mean_ns / median(mean_ns) OVER (PARTITION BY job, kernel_id, signature) - 1 AS dev
                   FROM kernel_hourly)
        SELECT avg((dev > 0.08)::INT), avg((dev < -0.08)::INT) FROM s""").fetchone()
    assert 0.003 < spikes[0] < 0.06 and spikes[1] < 0.003


def test_fleet_layout_for_large_fleets():
    from simulator.fleet import build_fleet

    fleet = build_fleet(1024, np.random.default_rng(0))
    assert len(fleet.hosts) == 128 and fleet.hosts[0] == "gpu-node-000" and fleet.hosts[-1] == "gpu-node-127"
    assert len(set(fleet.gpu_uuid)) == 1024 and all(u.startswith("GPU-") and len(u) == 40 for u in fleet.gpu_uuid)
    by_kind: dict[str, list] = {}
    for job in fleet.jobs:
        by_kind.setdefault(job.workload.name, []).append(job)
    assert {j.name for j in by_kind["train-llama"]} >= {"train-llama", "train-llama-2"}
    assert all(len(j.gpus) == 32 for j in by_kind["train-llama"])  # 4 hosts per FSDP job
    assert all(len(j.gpus) == 4 for j in by_kind["train-vit"])
    assert all(len(j.gpus) == 32 for j in by_kind["serve-llama"])  # 4 replicas x 8 mixed hosts
    gpus = sorted(g for j in fleet.jobs for g in j.gpus)
    assert gpus == list(range(1024))  # every GPU runs exactly one job
    assert len(fleet.processes) == 1024 and len({(p.pid, p.run_id) for p in fleet.processes}) == 1024


def test_inference_load_is_diurnal(tmp_path):
    simulate_fleet(tmp_path / "s", gpus=4, hours=24, seed=1, start=START, injections=[])
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "s", con)
    launches = [r[0] for r in con.execute("SELECT launches FROM job_hourly WHERE job = 'serve-llama' ORDER BY hour").fetchall()]
    assert len(launches) == 24 and max(launches) / min(launches) > 2.0
    train = [r[0] for r in con.execute("SELECT launches FROM job_hourly WHERE job = 'train-llama' ORDER BY hour").fetchall()]
    assert np.percentile(train, 90) / np.percentile(train, 10) < 1.05  # a restart hour may dip


def test_training_jobs_restart_with_new_run_ids(tmp_path, monkeypatch):
    from simulator import plan

    monkeypatch.setattr(plan, "RESTART_EVERY_H", 3.0)
    simulate_fleet(tmp_path / "s", gpus=4, hours=10, seed=4, start=START, injections=[])
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "s", con)
    runs = con.execute("""SELECT gpu_uuid, count(DISTINCT run_id), count(DISTINCT pid) FROM kernels
                          WHERE job = 'train-llama' GROUP BY gpu_uuid""").fetchall()
    assert len(runs) == 2 and all(n_run > 1 and n_pid == n_run for _, n_run, n_pid in runs)
    # The hour a run starts (after the first), its first window is empty: the job was down.
    starts = con.execute("""SELECT min(window_start) AS first FROM kernels WHERE job = 'train-llama' GROUP BY run_id
                            HAVING first > ? ORDER BY 1""", [START]).fetchall()
    assert len(starts) == sum(n_run - 1 for _, n_run, _ in runs)
    for (first,) in starts:
        assert first.minute == 10
        assert con.execute("SELECT count(*) FROM health WHERE job = 'train-llama' AND window_start = ?",
                           [first.replace(minute=0)]).fetchone()[0] == 0
    # Serving replicas do not restart.
    assert con.execute("SELECT count(DISTINCT run_id) FROM kernels WHERE job = 'serve-llama'").fetchone()[0] == 1


# -- the default scenario and each injection kind -------------------------------------------------

def test_default_scenario_has_each_core_kind_at_distinct_onsets():
    onsets = default_onsets(48)
    assert len(set(onsets)) == len(CORE_KINDS)
    assert min(onsets) >= 24 and max(onsets) <= 48 - 8
    short = default_onsets(12)
    assert all(6 <= h <= 12 - 2 for h in short)


def test_default_ground_truth(default_run):
    truth, _, _ = default_run
    assert [r["kind"] for r in truth.regressions] == list(CORE_KINDS)
    assert len({r["onset"] for r in truth.regressions}) == len(CORE_KINDS)
    for r in truth.regressions:
        assert set(r) >= {"job", "kernel", "kernel_id", "gpu_uuid", "onset", "kind", "magnitude_pct"}
        assert 8 <= r["magnitude_pct"] <= 25
        assert _onset_index(r) >= 10 and _onset_index(r) <= 20 - 5
    assert _truth(truth, "clock_throttle")["gpu_uuid"].startswith("GPU-")


def test_kernel_slowdown_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "kernel_slowdown")
    mean = _hourly(con, "SELECT hour, sum(total_ns) / sum(launches) FROM kernel_hourly WHERE job = ? AND kernel_id = ? GROUP BY hour",
                   (rec["job"], rec["kernel_id"]))
    throttle = _truth(truth, "clock_throttle")  # same job, later: one GPU's kernels slow down too
    assert throttle["job"] == rec["job"]
    ratio = _ratio(mean, _onset_index(rec), _onset_index(throttle))
    assert ratio == pytest.approx(1 + rec["magnitude_pct"] / 100, abs=0.03)


def test_launch_config_change_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "launch_config_change")
    onset = _onset_index(rec)
    sigs = con.execute("""SELECT signature, min(hour), max(hour), sum(total_ns) / sum(launches) FROM kernel_hourly
                          WHERE job = ? AND kernel_id = ? GROUP BY signature ORDER BY 2""", [rec["job"], rec["kernel_id"]]).fetchall()
    assert len(sigs) == 2
    (old_sig, _, old_last, old_mean), (new_sig, new_first, _, new_mean) = sigs
    assert old_sig != new_sig
    assert old_last == _at(onset - 1) and new_first == _at(onset)
    assert new_mean / old_mean == pytest.approx(1 + rec["magnitude_pct"] / 100, abs=0.04)


def test_new_kernel_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "new_kernel")
    first = con.execute("SELECT min(hour) FROM kernel_hourly WHERE kernel_id = ?", [rec["kernel_id"]]).fetchone()[0]
    assert first == _at(_onset_index(rec))
    share = con.execute("""SELECT sum(total_ns) FILTER (WHERE kernel_id = ?) / sum(total_ns) FILTER (WHERE kernel_id != ?)
                           FROM kernels WHERE job = ? AND window_start >= ?""",
                        [rec["kernel_id"], rec["kernel_id"], rec["job"], first]).fetchone()[0]
    assert share == pytest.approx(rec["magnitude_pct"] / 100, abs=0.02)


def test_more_launches_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "more_launches")
    # Launches of the kernel per launch of the job's main GEMM (launches per step), before and after.
    per_step = _hourly(con, """SELECT hour, sum(launches) FILTER (WHERE kernel_id = ?)
                                      / sum(launches) FILTER (WHERE kernel LIKE 'sm90_xmma_gemm%tn_n%')
                               FROM kernel_hourly WHERE job = ? GROUP BY hour""", (rec["kernel_id"], rec["job"]))
    assert _ratio(per_step, _onset_index(rec)) == pytest.approx(1 + rec["magnitude_pct"] / 100, abs=0.02)


def test_pageable_memcpy_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "pageable_memcpy")
    onset = _at(_onset_index(rec))
    kinds = con.execute("""SELECT src_kind, min(window_start), max(window_start), sum(bytes) / sum(total_ns) FROM memcpy
                           WHERE job = ? AND copy_kind = 'HtoD' GROUP BY src_kind""", [rec["job"]]).fetchall()
    by = {k: (lo, hi, gbps) for k, lo, hi, gbps in kinds}
    assert by["pageable"][0] == onset and by["pinned"][1] < onset
    assert by["pageable"][2] < 0.5 * by["pinned"][2]
    # The job makes fewer steps: GPU time per hour falls by about 1 / (1 + pct).
    busy = _hourly(con, "SELECT hour, gpu_busy_s FROM job_hourly WHERE job = ?", (rec["job"],))
    assert _ratio(busy, _onset_index(rec)) == pytest.approx(1 / (1 + rec["magnitude_pct"] / 100), abs=0.03)


def test_clock_throttle_is_visible(default_run):
    truth, con, _ = default_run
    rec = _truth(truth, "clock_throttle")
    onset = _onset_index(rec)
    dev = con.execute("""SELECT hour, sm_clock_mhz, clocks_event_reasons, temp_c FROM device_hourly
                         WHERE gpu_uuid = ? ORDER BY hour""", [rec["gpu_uuid"]]).fetchall()
    for hour, clock, reasons, temp in dev:
        if hour < _at(onset):
            assert clock == 1980 and reasons == 0
        else:
            assert clock < 1980 / (1 + rec["magnitude_pct"] / 100) + 20
            assert reasons & (0x4 | 0x20 | 0x40) and reasons & 0x20
            assert temp > 85
    others = con.execute("SELECT bit_or(clocks_event_reasons), min(sm_clock_mhz) FROM device WHERE gpu_uuid != ?",
                         [rec["gpu_uuid"]]).fetchone()
    assert others == (0, 1980.0)
    # That GPU's kernels are slower than its peers' by about pct after the onset (GEMM: same config).
    slow = con.execute("""SELECT gpu_uuid = ? AS hit, sum(total_ns) / sum(launches) FROM kernels
                          WHERE job = ? AND kernel LIKE 'sm90_xmma_gemm%nt_n%' AND window_start >= ? GROUP BY hit""",
                       [rec["gpu_uuid"], rec["job"], _at(onset)]).fetchall()
    by = dict(slow)
    assert by[True] / by[False] == pytest.approx(1 + rec["magnitude_pct"] / 100, abs=0.03)


def test_extra_kinds_are_visible(tmp_path):
    injections = parse_injections([
        "kind=memcpy_throughput_drop,job=train-vit,hour=4,pct=40",
        "kind=gpu_idle_gaps,job=train-llama,hour=5,pct=20",
        "kind=contention,job=serve-llama,hour=6,pct=25,gpu=7",
        "kind=kernel_vanished,job=train-llama,kernel=AllReduce_Sum,hour=7",
    ])
    truth = simulate_fleet(tmp_path / "s", gpus=8, hours=10, seed=2, start=START, injections=injections)
    assert [r["kind"] for r in truth.regressions] == [i.kind for i in injections]
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "s", con)
    gbps = _hourly(con, "SELECT hour, bytes_per_ns FROM memcpy_hourly WHERE job = 'train-vit' AND copy_kind = 'HtoD'"
                        " AND src_kind = 'pinned' AND bytes / count > 1e6")
    assert _ratio(gbps, 4) == pytest.approx(1 / 1.4, abs=0.04)
    busy = _hourly(con, "SELECT hour, gpu_busy_s FROM job_hourly WHERE job = 'train-llama'")
    assert _ratio(busy, 5, 7) == pytest.approx(1 / 1.2, abs=0.03)
    util = _hourly(con, """SELECT hour, avg(sm_util_pct) FROM device_hourly WHERE gpu_uuid IN
                           (SELECT DISTINCT gpu_uuid FROM kernels WHERE job = 'train-llama') GROUP BY hour""")
    assert _ratio(util, 5, 7) < 0.88
    rec = _truth(truth, "contention")
    assert rec["gpu_uuid"] == json.loads(truth.path.read_text())["gpu_uuids"][7]
    jobs = con.execute("SELECT DISTINCT job FROM kernels WHERE gpu_uuid = ? AND window_start >= ?",
                       [rec["gpu_uuid"], _at(6)]).fetchall()
    assert len(jobs) == 2 and con.execute("SELECT count(DISTINCT job) FROM kernels WHERE gpu_uuid = ? AND window_start < ?",
                                          [rec["gpu_uuid"], _at(6)]).fetchone()[0] == 1
    mean = _hourly(con, """SELECT date_trunc('hour', window_start), sum(total_ns) / sum(launches) FROM kernels
                           WHERE gpu_uuid = ? AND job = 'serve-llama' AND kernel LIKE 'sm90_xmma_gemm%64x128%' GROUP BY 1""",
                   (rec["gpu_uuid"],))
    assert _ratio(mean, 6) == pytest.approx(1.25, abs=0.05)
    gone = _truth(truth, "kernel_vanished")
    last = con.execute("SELECT max(hour) FROM kernel_hourly WHERE job = 'train-llama' AND kernel_id = ?",
                       [gone["kernel_id"]]).fetchone()[0]
    assert last == _at(6)


# -- parse_injections and resolution errors -------------------------------------------------------

def test_parse_injections():
    (inj,) = parse_injections(["kind=kernel_slowdown,job=train-llama,kernel=flash_fwd,hour=30,pct=8,gpu=3"])
    assert inj == Injection("kernel_slowdown", "train-llama", "flash_fwd", 30, 8.0, 3)
    assert parse_injections(["none"]) == []
    assert parse_injections(["kind=clock_throttle"]) == [Injection("clock_throttle")]


@pytest.mark.parametrize("spec, message", [
    ("kind=bogus", "unknown injection kind 'bogus'"),
    ("kind=kernel_slowdown,speed=3", "unknown key 'speed'"),
    ("job=train-llama,hour=3", "kind=... is required"),
    ("kind=kernel_slowdown,hour=soon", "invalid literal"),
    ("kind=kernel_slowdown,pct", "not key=value"),
    ("kind=kernel_slowdown,pct=-5", "pct must be"),
    ("kind=kernel_slowdown,hour=0", "hour must be >= 1"),
])
def test_parse_injections_errors(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_injections([spec])


@pytest.mark.parametrize("spec, message", [
    ("kind=kernel_slowdown,job=train-gpt,hour=2", "no job 'train-gpt'"),
    ("kind=kernel_slowdown,job=train-llama,kernel=sm90_xmma_gemm,hour=2", "matches several kernels"),
    ("kind=kernel_slowdown,job=train-llama,kernel=no_such_kernel,hour=2", "matches no kernel"),
    ("kind=kernel_slowdown,hour=9", "outside the run"),
    ("kind=clock_throttle,gpu=7,hour=2", "does not run job train-llama"),
])
def test_resolution_errors(tmp_path, spec, message):
    with pytest.raises(ValueError, match=message):
        simulate_fleet(tmp_path, gpus=8, hours=4, seed=0, start=START, injections=parse_injections([spec]))
    assert not (tmp_path / "ground_truth.json").exists()


def test_small_fleets_and_bad_arguments(tmp_path):
    truth = simulate_fleet(tmp_path / "one", gpus=1, hours=3, seed=0, start=START)
    assert {r["job"] for r in truth.regressions} <= {"train-llama"}
    with pytest.raises(ValueError, match="window_s must divide 3600"):
        simulate_fleet(tmp_path / "x", gpus=2, hours=2, seed=0, start=START, window_s=700)
    assert math.isfinite(truth.shards) and truth.shards == 4 * 3
