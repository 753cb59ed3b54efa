"""`cudawatch demo` end to end: simulated fleet -> DuckDB -> analysis -> report, checked against
the simulator's ground truth."""

import datetime as dt
import html
import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.demo import run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("demo"))


def matches(reg, truth):
    """Does a detected regression explain an injected one? (onset within +-2 h)"""
    onset = dt.datetime.fromisoformat(truth["onset"])
    if abs((reg.onset - onset).total_seconds()) > 2 * 3600:
        return False
    if truth.get("gpu_uuid"):
        return reg.gpu_uuid == truth["gpu_uuid"]
    if reg.job != truth["job"]:
        return False
    return truth.get("kernel_id") is None or reg.kernel_id in (truth["kernel_id"], None)


def test_demo_finds_every_injected_regression(demo):
    truth = json.loads(demo.ground_truth.read_text())["regressions"]
    assert len(truth) >= 6
    missed = [t for t in truth if not any(matches(r, t) for r in demo.regressions)]
    assert missed == []


def test_demo_regressions_are_mostly_injected_ones(demo):
    truth = json.loads(demo.ground_truth.read_text())["regressions"]
    unexplained = [r for r in demo.regressions if not any(matches(r, t) for t in truth)]
    # A regression may surface in several series (e.g. a kernel and its job's busy time), but
    # noise alone must not produce alerts.
    assert len(unexplained) <= len(truth) // 2, [r.to_json() for r in unexplained]


def test_demo_report_lists_the_regressions(demo):
    page = demo.report.read_text()
    truth = json.loads(demo.ground_truth.read_text())["regressions"]
    for t in truth:
        if t.get("kernel"):
            assert html.escape(t["kernel"])[:40] in page


def test_demo_warehouse_answers_sql(demo):
    out = CliRunner().invoke(app, ["query", "--db", str(demo.db), "--format", "json",
                                   "SELECT count(DISTINCT gpu_uuid) AS gpus FROM device"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == [{"gpus": 16}]


def test_demo_cli_prints_paths(tmp_path):
    # A smaller fleet than the default (the fixture above runs the default demo).
    out = CliRunner().invoke(app, ["demo", "--workdir", str(tmp_path / "d"), "--gpus", "8", "--hours", "30"])
    assert out.exit_code == 0, out.output
    assert "report:" in out.output and (tmp_path / "d" / "report.html").exists()
    assert "regressions:" in out.output
