"""Falls of a job's GPU busy time with wall time unchanged (idle gaps, a vanished kernel), end to
end: a simulated fleet -> shards -> DuckDB -> ``app.hour.run_hour`` hour by hour, as the hourly DAG
runs it. Fleets of 9.5 days, so the busy-share series has a week of history and goes through the
sequential detector; the kernel-presence series (0/1) goes through the change points. Seeds 61/62
were not looked at while building the series."""

import datetime as dt
import json

import pytest

import simulator
from analytics import online
from analytics.store import Store, ingest_shards
from analytics.store import series as sr
from app.hour import run_hour

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
H = dt.timedelta(hours=1)
HOURS = 228
ONSET = 220  # hour 4 of day 9: the day's noise model has 205 hours of history


def fleet(tmp_path, seed, kind=None):
    inj = simulator.parse_injections([f"kind={kind},hour={ONSET}"]) if kind else []
    simulator.simulate_fleet(tmp_path / "shards", gpus=8, hours=HOURS, seed=seed, start=START, injections=inj)
    st = Store(tmp_path / "w.duckdb")
    with st.writer() as con:
        ingest_shards(tmp_path / "shards", con)
    truth = json.loads((tmp_path / "shards" / "ground_truth.json").read_text())
    return st, truth.get("regressions", truth) if isinstance(truth, dict) else truth


@pytest.mark.parametrize("seed", [61, 62])
@pytest.mark.parametrize("kind,series", [("gpu_idle_gaps", "job_busy_share"), ("kernel_vanished", "kernel_presence")])
def test_busy_time_falls_are_found_within_three_hourly_runs(tmp_path, seed, kind, series):
    st, truth = fleet(tmp_path, seed, kind)
    (t,) = truth
    onset = dt.datetime.fromisoformat(t["onset"])
    found = {}
    for h in range(ONSET - 1, ONSET + 3):  # the runs of onset - 1 .. onset + 2: three hours of the new level
        for r in run_hour(st, START + h * H).regressions:
            found.setdefault(r.event_id, r)
    ours = [r for r in found.values() if r.job == t["job"] and abs(r.onset - onset) <= H
            and (t["kernel_id"] is None or r.kernel_id == t["kernel_id"])]
    assert len(ours) == 1, [r.to_json() for r in found.values()]
    (r,) = ours
    assert r.series == series and r.magnitude_pct < -5
    assert r.detected_at <= onset + 2 * H
    assert r.causes and r.causes[0].rule == kind
    if series == "job_busy_share":  # that series went through the sequential detector
        with st.reader() as con:
            mat = sr.load_matrix(con, sr.SPEC_BY_NAME[series], r.detected_at, online.lookback_hours())
        res = online.sequential_alarms(mat.values, r.detected_at.hour, bad=-1)
        i = [k[0] for k in mat.keys].index(t["job"])
        assert i in res.rows.tolist()
        assert res.alarms.alarm[res.rows.tolist().index(i)]


# Seeds 61 and 62 raised 1 and 2 false kernel_time_share events at thresholds 2026-12-03.2 (strict
# xfails until then): the fleet simulator's 0.15 %/h random-walk drift against a null without drift.
# With the drift term (2026-12-04.1) both raise nothing; docs/detection.md.
@pytest.mark.parametrize("seed", [61, 62])
def test_clean_fleet_raises_nothing_in_a_day_of_hourly_runs(tmp_path, seed):
    st, truth = fleet(tmp_path, seed)
    assert truth == []
    raised = []
    for h in range(HOURS - 24, HOURS):
        raised += run_hour(st, START + h * H).regressions
    assert raised == [], [r.to_json() for r in raised]


def _intermittent_job(root, hours, seed, present=0.8):
    """Shards of one job on two GPUs: a GEMM every hour and an evaluation kernel in a random
    ``present`` share of the hours (clean: nothing changes)."""
    import numpy as np
    import pyarrow as pa

    from cudawatch import shards as sh

    rng = np.random.default_rng(seed)
    for h in range(hours):
        ts, rows = START + h * H, []
        kernels = [("gemm", 100_000.0, 5000)] + ([("eval_softmax", 20_000.0, 800)] if rng.random() < present else [])
        for gpu in range(2):
            for name, base, launches in kernels:
                mean, n = base * (1 + rng.normal(0, 0.01)), int(launches + rng.normal(0, 20))
                rows.append(dict(window_start=ts, window_s=3600, host="h1", gpu_uuid=f"GPU-{gpu}", gpu_index=gpu, gpu_model="H200",
                                 job="train", run_id="r1", pid=100 + gpu, kernel=name, kernel_id=sh.kernel_id_of(name), grid_x=128,
                                 grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1, registers_per_thread=32, shared_mem_bytes=0,
                                 launches=n, total_ns=int(mean * n), min_ns=int(mean * 0.9), max_ns=int(mean * 1.1),
                                 sumsq_ns2=mean * mean * n, sampling_duty=1.0))
        sh.write_shard(root, "kernels", pa.Table.from_pylist(rows), ts, host="h1", pid=1)


def test_an_intermittent_kernel_is_not_a_vanished_kernel(tmp_path):
    # change points on the 0/1 series raised a -100 % event here (and on 6 of 20 seeds); the
    # absent-run rule (analytics.presence) raises none on seeds 0-19
    from analytics import detect

    _intermittent_job(tmp_path / "shards", 120, seed=3)
    st = Store(tmp_path / "w.duckdb")
    with st.writer() as con:
        ingest_shards(tmp_path / "shards", con)
        raised = {(r.series, r.kernel) for h in range(96, 120) for r in detect.detect_regressions(con, START + h * H)}
    assert ("kernel_presence", "eval_softmax") not in raised, raised
