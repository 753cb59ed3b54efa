"""``cudawatch alert`` and ``cudawatch report`` on a warehouse analysed by the real detector."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from analytics import store
from analytics.store import Store
from app.cli import app
from app.hour import catch_up
from analytics.store import report as data
from reports import render


@pytest.fixture(scope="module")
def analysed_master(fleet_db, tmp_path_factory):
    db = tmp_path_factory.mktemp("analysed") / "analysed.duckdb"
    shutil.copy(fleet_db, db)
    regs = catch_up(Store(db)).regressions
    assert regs, "the fleet has a slower GEMM and a throttled GPU"
    return db, regs


@pytest.fixture
def analysed_db(analysed_master, tmp_path):
    db = tmp_path / "analysed.duckdb"
    shutil.copy(analysed_master[0], db)
    return db, analysed_master[1]


def test_alert_sends_new_regressions_once(analysed_db, receiver, monkeypatch):
    db, regs = analysed_db
    monkeypatch.setenv("CUDAWATCH_SLACK_WEBHOOK_URL", receiver.url + "/slack")
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", receiver.url + "/webhook")
    runner = CliRunner()
    first = runner.invoke(app, ["alert", "--db", str(db), "--report-url", "https://r.example/x"])
    assert first.exit_code == 0, first.output
    assert f"{2 * len(regs)} queued, {2 * len(regs)} sent" in first.output
    keys = sorted(r.headers["idempotency-key"] for r in receiver.on("/webhook"))
    assert keys == sorted(r.event_id for r in regs)
    second = runner.invoke(app, ["alert", "--db", str(db)])
    assert second.exit_code == 0 and "0 queued, 0 sent" in second.output
    assert len(receiver.requests) == 2 * len(regs)


def test_alert_without_channels_is_a_clear_error(analysed_db, monkeypatch):
    monkeypatch.delenv("CUDAWATCH_SLACK_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("CUDAWATCH_WEBHOOK_URL", raising=False)
    res = CliRunner().invoke(app, ["alert", "--db", str(analysed_db[0])])
    assert res.exit_code == 2 and "CUDAWATCH_SLACK_WEBHOOK_URL" in res.output


def test_alert_failure_exit_code(analysed_db, receiver, monkeypatch):
    receiver.respond("/webhook", *[(410, {}, 0)] * 10)
    monkeypatch.delenv("CUDAWATCH_SLACK_WEBHOOK_URL", raising=False)
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", receiver.url + "/webhook")
    res = CliRunner().invoke(app, ["alert", "--db", str(analysed_db[0])])
    assert res.exit_code == 1 and "HTTP 410" in res.output
    n = len(analysed_db[1])
    assert len(receiver.on("/webhook")) == n
    # the receiver is fixed: --retry-failed sends them again, a plain run would not
    receiver.script["/webhook"] = []
    assert CliRunner().invoke(app, ["alert", "--db", str(analysed_db[0])]).exit_code == 0 and len(receiver.on("/webhook")) == n
    res = CliRunner().invoke(app, ["alert", "--db", str(analysed_db[0]), "--retry-failed"])
    assert res.exit_code == 0 and f"requeued {n} failed alerts" in res.output and f"{n} sent" in res.output
    assert len(receiver.unique) == n


def test_report_shows_the_detectors_regressions(analysed_db, tmp_path):
    db, regs = analysed_db
    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", "--db", str(db), "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    for r in regs:
        assert f'id="r-{r.event_id}"' in html
        assert (tmp_path / f"report-{r.event_id}.html").exists()


def test_report_reads_the_detectors_table_on_a_read_only_connection(analysed_db):
    db, regs = analysed_db
    con = store.connect(db, read_only=True)
    try:
        rep = render.build_report(con, data.last_day(con), image_mode="cid")
    finally:
        con.close()
    assert all(f'id="r-{r.event_id}"' in rep.html for r in regs)
    assert len(rep.images) == 2 + len(regs)
