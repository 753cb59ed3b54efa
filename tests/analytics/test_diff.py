"""Trace diff between two windows of a job, on a real warehouse, and through `cudawatch diff`."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from analytics import store
from analytics.store.diff import SCHEMA, trace_diff
from app.cli import app
from tests.analytics.test_context import GEMM, GEMM_N, NORM, ONSET, SOFTMAX, START, build


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diff")
    build(tmp / "shards")
    path = tmp / "w.duckdb"
    con = store.connect(path)
    store.ingest_shards(tmp / "shards", con)
    con.close()
    return path


def rows_of(table):
    return {r["kernel_id"]: r for r in table.to_pylist()}


def test_added_removed_slower_sorted_by_impact(db):
    con = store.connect(db, read_only=True)
    table = trace_diff(con, "train", START, ONSET, hours=6)
    assert table.schema == SCHEMA
    assert table.column("kernel_id").to_pylist()[0] == GEMM  # the biggest GPU-time change comes first
    rows = rows_of(table)
    gemm, norm, softmax = rows[GEMM], rows[NORM], rows[SOFTMAX]
    assert gemm["status"] == "slower" and gemm["change_pct"] == pytest.approx(17.5, abs=1e-3)
    assert gemm["launches_before"] == gemm["launches_after"] == 6 * 6 * 2 * GEMM_N
    assert gemm["delta_gpu_s"] == pytest.approx(36 * GEMM_N * (110e-6 + 125e-6 - 2 * 100e-6), rel=1e-6)
    assert gemm["configs_before"] == gemm["configs_after"] == 1 and not gemm["configs_changed"]
    assert (norm["status"], norm["launches_after"], norm["share_after"], norm["mean_ns_after"]) == ("removed", 0.0, 0.0, None)
    assert (softmax["status"], softmax["launches_before"], softmax["change_pct"]) == ("added", 0.0, None)
    assert sum(table.column("share_before").to_pylist()) == pytest.approx(1.0)
    assert sum(table.column("share_after").to_pylist()) == pytest.approx(1.0)
    con.close()


def test_same_and_faster(db):
    con = store.connect(db, read_only=True)
    same = rows_of(trace_diff(con, "train", START, START + dt.timedelta(hours=3), hours=3))
    assert {r["status"] for r in same.values()} == {"same"}
    faster = rows_of(trace_diff(con, "train", ONSET, START, hours=6))  # the windows swapped
    assert faster[GEMM]["status"] == "faster" and faster[NORM]["status"] == "added"
    con.close()


def test_bad_input_is_a_clear_error(db):
    con = store.connect(db, read_only=True)
    with pytest.raises(ValueError, match="job 'nope' has no kernel data.*train"):
        trace_diff(con, "nope", START, ONSET, hours=6)
    with pytest.raises(ValueError, match="overlap"):
        trace_diff(con, "train", START, START + dt.timedelta(hours=2), hours=6)
    with pytest.raises(ValueError, match="hours must be >= 1"):
        trace_diff(con, "train", START, ONSET, hours=0)
    con.close()


def test_cli_diff_json(db):
    out = CliRunner().invoke(app, ["diff", "--db", str(db), "--job", "train", "--before", START.isoformat(),
                                   "--after", ONSET.isoformat(), "--hours", "6", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert [r["status"] for r in rows][0] == "slower" and {r["status"] for r in rows} == {"slower", "added", "removed"}
