"""Tests of ``simulate_fleet(..., jobs=N)``: a varied job mix with jobs starting, ending and moving."""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import numpy as np
import pytest

from simulator import simulate_fleet
from simulator.mix import build_mixed_fleet

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    truth = simulate_fleet(root, gpus=96, hours=12, seed=3, start=START, jobs=24)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for t in ("kernels", "health", "device"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{root}/{t}/**/*.parquet')")
    yield truth, con, json.loads(truth.path.read_text())
    con.close()


def test_mix_has_the_jobs_models_and_more_series_than_the_standard_layout(mixed, tmp_path):
    truth, con, doc = mixed
    jobs = {r[0] for r in con.execute("SELECT DISTINCT job FROM health").fetchall()}
    assert len(jobs) == 24 and {"train-llama", "train-vit", "serve-llama"} <= jobs
    assert len({j["workload"] for j in doc["jobs"]}) >= 8  # several model sizes of each template
    series = "SELECT count(*) FROM (SELECT DISTINCT host, job, kernel_id, grid_x, block_x, registers_per_thread FROM {})"
    mixed_series = con.execute(series.format("kernels")).fetchone()[0]
    simulate_fleet(tmp_path, gpus=96, hours=2, seed=11, start=START, injections=[])
    std = duckdb.connect().execute(series.format(f"read_parquet('{tmp_path}/kernels/**/*.parquet')")).fetchone()[0]
    assert mixed_series > std
    # the default regressions still land on the template jobs
    assert {r["job"] for r in truth.regressions} <= {"train-llama", "train-vit", "serve-llama"} and truth.regressions


def test_jobs_start_late_end_early_and_move(mixed):
    _, con, _ = mixed
    spans = con.execute("""SELECT job, min(hour(window_start)), max(hour(window_start)), count(DISTINCT run_id)
                           FROM health GROUP BY job""").fetchall()
    assert any(lo > 0 for _, lo, _, _ in spans), "no job starts late"
    assert any(hi < 11 for _, _, hi, _ in spans), "no job ends early"
    # A moved job: it runs on one GPU set, then on a disjoint one, without overlap in time.
    fleet = build_mixed_fleet(96, 24, 12, np.random.default_rng(3))  # the fixture's fleet
    by_job: dict[int, list] = {}
    for p in fleet.processes:
        by_job.setdefault(p.job, []).append(p)
    movers = [ps for ps in by_job.values() if len({p.start for p in ps}) > 1 and min(p.start for p in ps) == 0]
    assert movers, "no job moves in this seed"
    for ps in movers:
        first = {p.gpu for p in ps if p.start == 0}
        later = {p.gpu for p in ps if p.start > 0}
        assert first and later and not first & later
    # No GPU ever runs two processes of the mix at the same hour.
    for g in range(96):
        hours = np.zeros(12, int)
        for p in fleet.processes:
            if p.gpu == g:
                hours[p.start:p.stop or 12] += 1
        assert hours.max() <= 1, g


def test_mix_is_deterministic_and_checks_its_arguments(tmp_path):
    a = build_mixed_fleet(64, 10, 24, np.random.default_rng(4))
    b = build_mixed_fleet(64, 10, 24, np.random.default_rng(4))
    assert [(j.name, j.gpus) for j in a.jobs] == [(j.name, j.gpus) for j in b.jobs]
    assert len({p.gpu for p in a.processes}) <= 64 and len(a.jobs) == 10
    with pytest.raises(ValueError, match="at least 3"):
        simulate_fleet(tmp_path, gpus=8, hours=2, seed=0, start=START, jobs=2)
    with pytest.raises(ValueError, match="more than the 4 GPUs"):
        simulate_fleet(tmp_path, gpus=4, hours=2, seed=0, start=START, jobs=5)
