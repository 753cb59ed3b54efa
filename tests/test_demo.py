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
    for stage in ("simulating 8 GPUs", "loading shards", "analysing hour by hour", "rendering the report"):
        assert stage in out.output  # rich progress for every stage
    assert "next:" in out.output and "analyze --db" in out.output


def test_demo_hint_uses_a_command_that_works(monkeypatch, tmp_path):
    """Without the venv on PATH the hint is the script beside this interpreter, which runs."""
    import subprocess
    import sys

    from app.demo import command_path

    monkeypatch.setenv("PATH", str(tmp_path))  # no cudawatch on PATH
    exe = command_path()
    assert exe != "cudawatch"
    argv = exe.split() + ["--version"]
    done = subprocess.run(argv if "/" in argv[0] or argv[0].startswith(".") else [sys.executable, *argv[1:]],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0 and done.stdout.startswith("cudawatch "), done


def test_console_order_is_the_reports_order(demo):
    page = demo.report.read_text()
    cards = [page.index(f'id="r-{r.event_id}"') for r in demo.regressions]
    assert cards == sorted(cards)


# --- one regression, one number (issue 13) -------------------------------------------------------

#: causes whose sentence is about the regression's own metric, so it must state the regression's size
SAME_METRIC = {"kernel_mean_ns": {"kernel_slower", "launch_config_changed"},
               "kernel_id_mean_ns": {"kernel_slower", "launch_config_changed"},
               "kernel_launch_share": {"more_launches"}, "gpu_sm_clock_mhz": {"clock_throttle"}}


def _card(page: str, event_id: str) -> str:
    start = page.index(f'id="r-{event_id}"')
    end = page.find('<div class="card" id="r-', start + 1)
    return page[start:end if end > 0 else len(page)]


def _check_texts(block: str) -> list[str]:
    import re

    return [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in re.findall(r'data-check="(?:size|evidence)"[^>]*>(.*?)</(?:p|div)>', block, re.S)]


def test_every_view_shows_the_regressions_one_size(demo):
    """For every regression of the demo: the stored magnitude is size_pct(before, after); the
    report's glance row, card headline and detail page, the causes about the same metric, the
    plain-text report, the Slack message, `cudawatch analyze --format json` and `cudawatch diff
    --event` all show that one number (and the same before -> after values)."""
    from analytics.results import size_pct
    from reports import slack
    from reports.render import build_archived_report
    from analytics.store import Store
    from reports.evidence import sentence

    page = demo.report.read_text()
    with Store(demo.db).reader() as con:
        text = build_archived_report(con, _report_day(con), demo.report).text
    analyzed = CliRunner().invoke(app, ["analyze", "--db", str(demo.db), "--format", "json"])
    assert analyzed.exit_code == 0, analyzed.output
    as_json = {e["event_id"]: e for e in json.loads(analyzed.output)["regressions"]}
    assert demo.regressions
    for r in demo.regressions:
        size = r.size
        assert abs(r.magnitude_pct - size_pct(r.before, r.after)) < 1e-9, r.to_json()  # computed once, one definition
        shown = f"{size.change} ({size.values})"
        card = _card(page, r.event_id)
        head, *evidence = _check_texts(card)
        assert shown in head, (head, shown)  # the card's headline
        glance = page[page.index('id="glance"'):page.index('id="regressions"')]
        row = glance[glance.index(f'href="#r-{r.event_id}"'):]
        assert size.change in row[:row.index("</tr>")]  # the "At a glance" row
        detail = (demo.report.parent / f"{demo.report.stem}-{r.event_id}.html").read_text()
        assert shown in _check_texts(detail)[0]  # the detail page
        for f in r.causes:  # causes about the same metric state the same number
            if f.rule in SAME_METRIC.get(r.series, ()):
                s = sentence(f, r)
                assert size.change in s and size.values in s, (f.rule, s, shown)
                assert html.escape(s, quote=False) in html.unescape(card) or s in html.unescape(card)
        assert f"{r.metric.name} {shown}" in text  # the plain-text report (e-mail)
        blocks = json.dumps(slack.build_blocks([r], None), ensure_ascii=False)
        assert size.change in blocks and size.values in blocks  # Slack
        j = as_json[r.event_id]["size"]  # analyze --format json
        assert (j["before"], j["after"], j["unit"]) == (r.before * r.metric.scale, r.after * r.metric.scale, size.unit)
        assert f"{j['change_pct']:+.1f}%" == size.change or size.change.startswith(("new", "gone"))
        if r.kernel_id and r.job:
            out = CliRunner().invoke(app, ["diff", "--db", str(demo.db), "--event", r.event_id])
            assert out.exit_code == 0, out.output
            assert f"{r.metric.name} {shown}" in out.output.splitlines()[0]  # diff --event's headline


def _report_day(con):
    from analytics.store.report import last_day

    return last_day(con)
