"""Shared fixtures of the reliability tests: one simulated fleet with known regressions (the demo's
scenario), its clean analysis, and helpers that ingest/analyse a copy of it after a fault.

Every entry point of the product the tests use is imported here only, so a move of a module is a
one-line change."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

import simulator
from analytics import store
from app.hour import ANALYSIS, run_hour
from app.cli import app
from cudawatch import shards as sh

GPUS, HOURS, SEED = 16, 48, 7
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
#: The ingest clock of these tests: an hour after the simulated fleet's last hour.
NOW = START + dt.timedelta(hours=HOURS + 1)
LAST_HOUR = START + dt.timedelta(hours=HOURS - 1)


@dataclass
class Outcome:
    """What ingest + analyze produced on one shard tree."""

    ingest: store.IngestResult
    regressions: list
    db: Path

    def keys(self) -> set[tuple]:
        return {regression_key(r) for r in self.regressions}

    def causes(self) -> dict[tuple, str | None]:
        return {regression_key(r): (r.causes[0].rule if r.causes else None) for r in self.regressions}


def regression_key(r) -> tuple:
    return (r.series, r.job, r.kernel_id, r.gpu_uuid, r.onset)


def mark_analysed_before(db: Path, last: dt.datetime) -> None:
    """Record every hour of data before ``last`` as analysed, as if the hourly DAG had run them,
    so that `cudawatch analyze` analyses the last hour only (keeps CLI tests fast)."""
    with store.Store(db).writer() as con:
        h = store.hours.first_hour(con)
        while h < last:
            store.hours.mark_analysed(con, h)
            h += dt.timedelta(hours=1)


def run(root: Path, db: Path, now: dt.datetime = NOW, last_hour: dt.datetime = LAST_HOUR) -> Outcome:
    warehouse = store.Store(db)
    with warehouse.writer() as con:
        result = store.ingest_shards(root, con, now=now)
    # The hourly composition for the fleet's last hour (as the hourly DAG runs it): it sees the
    # whole detection lookback. (`cudawatch analyze` walks every hour; that equality is issue 12's test.)
    regressions = run_hour(warehouse, last_hour, stages=ANALYSIS).regressions
    print(f"\nobserved [{root.name}]: rows in {sum(result.rows_in.values())}, loaded {sum(result.rows.values())}, "
          f"{result.summary()}; {len(regressions)} regressions")  # shown with pytest -s (docs/reliability.md)
    return Outcome(result, regressions, db)


def query(db: Path, sql: str, params=None) -> list[tuple]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """The simulated fleet (shards + ground truth), written once per session; never modified."""
    root = tmp_path_factory.mktemp("fleet") / "shards"
    simulator.simulate_fleet(root, gpus=GPUS, hours=HOURS, seed=SEED, start=START)
    return root


@pytest.fixture(scope="session")
def truth(fleet):
    return json.loads((fleet / "ground_truth.json").read_text())


@pytest.fixture(scope="session")
def clean(fleet, tmp_path_factory):
    """Ingest + analysis of the untouched fleet: the reference every fault is compared with."""
    return run(fleet, tmp_path_factory.mktemp("clean") / "w.duckdb")


@pytest.fixture()
def copy(fleet, tmp_path):
    """A private copy of the fleet's shard tree to corrupt."""
    dst = tmp_path / "shards"
    shutil.copytree(fleet, dst)
    return dst


def shard_of(root: Path, table: str, host: str, hour: dt.datetime) -> Path:
    """The one shard the simulator wrote for (table, host, hour)."""
    found = [p for p in sh.list_shards(root, table, hour) if p.name.startswith(f"{host}-")]
    assert len(found) == 1, found
    return found[0]
