"""Regression layer on real DuckDB warehouses: small hand-built ones, and the simulated fleet end to end."""

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pytest

from analytics import baselines, detect, lifecycle, store
from analytics.detect import DetectConfig, ewma_deviation_check
from analytics.store.regressions import load_regressions
from cudawatch import shards as sh

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
H = dt.timedelta(hours=1)
KERNELS = (("gemm", 100_000.0, 5000), ("softmax", 20_000.0, 8000), ("rare", 5_000.0, 2))
#: The change points' lifecycle on these 60-h warehouses, where single runs look back 14-19 h: from
#: the third day on the series are young rows of the sequential path, whose zone is the last 12 h
#: (tests/analytics/test_young.py covers that path hour by hour).
CP = DetectConfig(seq_young_history=None)


def build(root, hours=60, step=None, seed=0, throttle=None):
    """Shards for one job on two GPUs: three kernels (one sparse) and SM clocks.

    step: (first_hour, last_hour or None, pct) slowdown of gemm; throttle: first hour GPU-1 runs
    30 % slower with a lower SM clock.
    """
    rng = np.random.default_rng(seed)
    for h in range(hours):
        ts = START + h * H
        rows, dev = [], []
        for gpu in range(2):
            slow = 1.3 if throttle is not None and h >= throttle and gpu == 1 else 1.0
            for name, base, launches in KERNELS:
                mean = base * (1 + rng.normal(0, 0.01)) * slow
                if name == "gemm" and step and h >= step[0] and (step[1] is None or h <= step[1]):
                    mean *= 1 + step[2] / 100
                if name == "rare":
                    n, mean = int(rng.integers(1, 4)), base * rng.uniform(0.5, 2.0)
                else:
                    n = int(launches * (1 + 0.2 * np.sin(2 * np.pi * h / 24)) + rng.normal(0, 20))
                rows.append(dict(window_start=ts, window_s=3600, host="h1", gpu_uuid=f"GPU-{gpu}", gpu_index=gpu,
                                 gpu_model="H200", job="train", run_id="r1", pid=100 + gpu, kernel=name,
                                 kernel_id=sh.kernel_id_of(name), grid_x=128, grid_y=1, grid_z=1, block_x=256, block_y=1,
                                 block_z=1, registers_per_thread=32, shared_mem_bytes=0, launches=n, total_ns=int(mean * n),
                                 min_ns=int(mean * 0.9), max_ns=int(mean * 1.1), sumsq_ns2=mean * mean * n, sampling_duty=1.0))
            for m in range(0, 60, 10):
                clk = (1400.0 if slow > 1 else 1980.0) + rng.normal(0, 5)
                dev.append(dict(ts=ts + dt.timedelta(minutes=m), host="h1", gpu_uuid=f"GPU-{gpu}", gpu_index=gpu,
                                gpu_model="H200", sm_clock_mhz=clk, mem_clock_mhz=2619.0))
        sh.write_shard(root, "kernels", pa.Table.from_pylist(rows), ts, host="h1", pid=1)
        sh.write_shard(root, "device", pa.Table.from_pylist(dev), ts, host="h1", pid=2)


_TEMPLATES: dict = {}


def warehouse_with(tmp_path, **kw):
    """A fresh warehouse of the scenario ``kw`` (built once per scenario, copied per test)."""
    key = repr(sorted(kw.items()))
    if key not in _TEMPLATES:
        base = tmp_path / "template"
        build(base / "shards", **kw)
        con = store.connect(base / "w.duckdb")
        store.ingest_shards(base / "shards", con)
        con.close()
        _TEMPLATES[key] = (base / "w.duckdb").read_bytes()
    (tmp_path / "w.duckdb").write_bytes(_TEMPLATES[key])
    return store.connect(tmp_path / "w.duckdb")


def table(con):
    return con.execute("SELECT * EXCLUDE (p_value), round(p_value, 30) FROM regressions ORDER BY event_id").fetchall()


def test_one_step_is_one_event_and_rerun_changes_nothing(tmp_path):
    con = warehouse_with(tmp_path, step=(45, None, 10.0))
    regs = detect.detect_regressions(con, START + 59 * H, CP)
    assert [(r.series, r.kernel, r.onset, r.status) for r in regs] == [("kernel_mean_ns", "gemm", START + 45 * H, "new")]
    r = regs[0]
    assert r.magnitude_pct == pytest.approx(10, abs=1.5) and r.p_value < 1e-5 and r.causes == ()
    assert 0.5 < r.share_gpu_time < 1 and r.severity in ("high", "critical") and r.detected_at == START + 59 * H
    before = table(con)
    assert detect.detect_regressions(con, START + 59 * H, CP) == regs
    assert table(con) == before


def test_status_goes_new_then_ongoing_then_resolved(tmp_path):
    con = warehouse_with(tmp_path, step=(40, 51, 10.0))
    assert [r.status for r in detect.detect_regressions(con, START + 42 * H, CP)] == ["new"]
    assert [r.status for r in detect.detect_regressions(con, START + 43 * H, CP)] == ["ongoing"]
    assert detect.detect_regressions(con, START + 59 * H, CP) == []
    (row,) = con.execute("SELECT status, onset, ended_at FROM regressions").fetchall()
    assert row[0] == "resolved" and row[1] == START + 40 * H and row[2] == START + 52 * H


def test_step_that_reverts_within_hours_is_recorded_not_returned(tmp_path):
    con = warehouse_with(tmp_path, step=(45, 48, 10.0))
    open_by_hour = {h: [r.status for r in detect.detect_regressions(con, START + h * H)] for h in range(44, 56)}
    assert open_by_hour[47] == ["new"] and open_by_hour[48] == ["ongoing"]
    assert all(open_by_hour[h] == [] for h in range(51, 56))
    rows = con.execute("SELECT series, status, onset, detected_at, ended_at FROM regressions").fetchall()
    assert rows == [("kernel_mean_ns", "went_away", START + 45 * H, START + 47 * H, START + 49 * H)]
    assert [r.status for r in load_regressions(con)] == ["went_away"]


def test_clean_warehouse_and_sparse_kernel_stay_quiet(tmp_path):
    con = warehouse_with(tmp_path, seed=4)
    for h in range(30, 60, 3):
        assert detect.detect_regressions(con, START + h * H) == []
    assert con.execute("SELECT count(*) FROM regressions").fetchone()[0] == 0


def test_throttled_gpu_is_one_gpu_event_not_kernel_events(tmp_path):
    con = warehouse_with(tmp_path, throttle=40)
    regs = detect.detect_regressions(con, START + 59 * H)
    assert [(r.series, r.gpu_uuid, r.job, r.onset) for r in regs] == [("gpu_sm_clock_mhz", "GPU-1", "train", START + 40 * H)]
    assert regs[0].magnitude_pct == pytest.approx(-29.3, abs=1)


def test_full_recompute_agrees_with_incremental(tmp_path):
    con = warehouse_with(tmp_path, step=(45, None, 10.0))
    inc = detect.detect_regressions(con, START + 59 * H)
    con.execute("DELETE FROM regressions")
    full = detect.detect_regressions(con, START + 59 * H, DetectConfig(incremental=False))
    assert [r.event_id for r in full] == [r.event_id for r in inc]


def test_load_regressions_filters_and_fills_causes(tmp_path):
    con = warehouse_with(tmp_path, step=(45, None, 10.0))
    (reg,) = detect.detect_regressions(con, START + 59 * H, CP)
    # detection created the findings table (analytics.store.regressions owns both tables)
    con.execute("INSERT INTO findings VALUES (?, 'kernel_slower_same_config', 0.9, ?, 'profile it'), (?, 'other', 0.2, 'not json', '')",
                [reg.event_id, json.dumps({"before_ns": 1.0}), reg.event_id])
    (loaded,) = load_regressions(con, since=START + 59 * H, statuses=("new",))
    assert loaded.event_id == reg.event_id
    assert [f.rule for f in loaded.causes] == ["kernel_slower_same_config", "other"]
    assert loaded.causes[0].evidence == {"before_ns": 1.0} and loaded.causes[0].recommendation == "profile it"
    assert load_regressions(con, until=START + 58 * H) == []
    assert load_regressions(con, statuses=("resolved",)) == []
    con.close()
    ro = store.connect(tmp_path / "w.duckdb", read_only=True)  # readers work on read-only connections
    assert [r.event_id for r in load_regressions(ro)] == [reg.event_id]


def test_empty_warehouse_gives_no_regressions(tmp_path):
    con = store.connect(tmp_path / "empty.duckdb")
    assert load_regressions(con) == []  # before any detection run: no table yet
    baselines.update_baselines(con, START)
    assert detect.detect_regressions(con, START + dt.timedelta(minutes=30)) == []
    assert con.execute("SELECT count(*) FROM regressions").fetchone()[0] == 0


def test_ewma_deviation_check_is_the_articles_rule():
    assert ewma_deviation_check(100.0, 100.0) is None
    assert ewma_deviation_check(120.0, 100.0) is None  # exactly 20 %: not above
    assert ewma_deviation_check(121.0, 100.0) == "medium"
    assert ewma_deviation_check(70.0, 100.0) == "medium"  # both directions, as in the article
    assert ewma_deviation_check(151.0, 100.0) == "high"
    assert ewma_deviation_check(5.0, 0.0) is None and ewma_deviation_check(float("nan"), 1.0) is None


# --------------------------------------------------------------------------- simulated fleet

DETECTABLE = {"kernel_slowdown", "launch_config_change", "new_kernel", "more_launches", "pageable_memcpy", "clock_throttle"}


def run_fleet(tmp_path, injections):
    import simulator

    root = tmp_path / "fleet"
    simulator.simulate_fleet(root, gpus=16, hours=48, seed=7, start=START, injections=injections)
    con = store.connect(tmp_path / "fleet.duckdb")
    store.ingest_shards(root, con, tables=("kernels", "memcpy", "device"))  # health is not detected on
    as_of = START + 47 * H
    baselines.update_baselines(con, as_of)
    regs = detect.detect_regressions(con, as_of)
    return json.loads((root / "ground_truth.json").read_text())["regressions"], regs


def matches(truth, reg):
    onset = dt.datetime.fromisoformat(truth["onset"])
    if abs(reg.onset - onset) > H:
        return False
    if truth["kind"] == "clock_throttle":
        return reg.gpu_uuid == truth["gpu_uuid"]
    if truth["kernel_id"] is None:
        return reg.job == truth["job"] and reg.kernel_id is None and reg.gpu_uuid is None
    return reg.job == truth["job"] and reg.kernel_id == truth["kernel_id"]


def test_simulated_fleet_every_injection_found_once(tmp_path):
    truth, regs = run_fleet(tmp_path, None)
    kinds = {t["kind"] for t in truth}
    assert DETECTABLE <= kinds
    for t in truth:
        if t["kind"] in DETECTABLE:
            found = [r for r in regs if matches(t, r)]
            assert len(found) == 1, (t, [r.to_json() for r in regs])
    assert len(regs) == len([t for t in truth if t["kind"] in DETECTABLE])  # nothing else raised
    assert all(abs(r.magnitude_pct) <= detect.MAX_MAGNITUDE_PCT for r in regs)


def test_simulated_clean_fleet_has_no_regressions(tmp_path):
    _, regs = run_fleet(tmp_path, [])
    assert regs == []


@pytest.mark.parametrize("tail, start", [
    ([1.0, 1.1, 1.1, 1.0, 1.0], 3),               # back at hour 3
    ([1.0, 1.1, 1.1, 1.0, 1.1, 1.0, 1.0], 3),     # one stray hour inside the return does not end it
    ([1.0, 1.1, 1.1, 1.0, np.nan, 1.0], 3),       # a missing hour is skipped
    ([1.0, 1.0, 1.0, 1.0, 1.0], 1),               # never before the hour after the onset (column 1 here)
    ([1.0, 1.1, 1.1, 1.1, 1.1], 4),               # not back: the last column
])
def test_back_since_finds_where_the_trailing_return_to_the_old_level_starts(tail, start):
    assert lifecycle.back_since(np.array(tail), before=1.0, after=1.1, first=1) == start
