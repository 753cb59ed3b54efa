"""Reports and alerts benchmark: how long the daily report takes, how big the e-mail is, and how
fast the outbox delivers alerts.

1. Simulate the demo fleet (16 GPUs x 48 h, seed 7), ingest, analyse (the real pipeline), then time
   ``render.write_report`` (HTML + detail pages) and ``render.build_report(image_mode="cid")`` +
   ``email.build_report_message`` (the e-mail), and report their sizes.
2. Queue N regression events for Slack and the webhook and deliver them to a real threaded HTTP
   server on loopback (``send_new_alerts``); report alerts per second including the DuckDB
   outbox bookkeeping (two commits per alert).

    .venv/bin/python benchmarks/reports.py [--workdir DIR] [--alerts 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--alerts", type=int, default=200)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="cw-bench-reports-"))

    import duckdb

    from analytics import store
    from cudawatch.config import AlertConfig
    from app.demo import run_demo
    from reports import email, render
    from reports.alerts import send_new_alerts
    from reports.http import RetryPolicy
    from tests.reports import fleet, receiver

    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    t = time.perf_counter()
    demo = run_demo(work / "demo")
    print(f"demo pipeline (simulate+ingest+analyse+report): {time.perf_counter() - t:.1f} s, {len(demo.regressions)} regressions")

    out = work / "report.html"
    t = time.perf_counter()
    render.write_report(demo.db, out, None)
    t_html = time.perf_counter() - t
    details = list(work.glob("report-*.html"))
    print(f"write_report: {t_html:.2f} s; report.html {out.stat().st_size / 1e3:.0f} kB + {len(details)} detail pages "
          f"({sum(p.stat().st_size for p in details) / 1e3:.0f} kB)")

    con = store.connect(demo.db, read_only=True)
    t = time.perf_counter()
    rep = render.build_report(con, render.parse_day(None, con), image_mode="cid")
    msg = email.build_report_message(rep.html, rep.text, rep.images, sender="a@example.org", to=["b@example.org"], subject=rep.subject)
    raw = msg.as_bytes()
    t_mail = time.perf_counter() - t
    con.close()
    print(f"e-mail build: {t_mail:.2f} s; message {len(raw) / 1e3:.0f} kB, {len(rep.images)} inline PNGs")

    rec = receiver.start()
    base = fleet.regressions()[0]
    # onsets 3 h apart: each its own incident (group_incidents links onsets <= 2 h apart), one POST each
    regs = [dataclasses.replace(base, onset=base.onset + dt.timedelta(hours=3 * i)) for i in range(args.alerts)]
    alert_db = duckdb.connect(str(work / "alerts.duckdb"))
    cfg = AlertConfig(slack_webhook_url=rec.url + "/slack", webhook_url=rec.url + "/webhook")
    t = time.perf_counter()
    # this measures the webhook path (one POST per incident)
    res = send_new_alerts(alert_db, dataclasses.replace(cfg, slack_webhook_url=None), regressions=regs, policy=RetryPolicy())
    t_alerts = time.perf_counter() - t
    print(f"alerts: {res.sent} webhook alerts in {t_alerts:.2f} s = {res.sent / t_alerts:.0f}/s "
          f"(queue in one transaction, 2 commits + 1 POST per alert); receiver saw {len(rec.requests)}")
    rec.server.shutdown()


if __name__ == "__main__":
    main()
