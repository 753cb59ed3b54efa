"""The daily report e-mail through a real SMTP server on loopback (aiosmtpd)."""

from __future__ import annotations

import email
import email.policy
import re
import socket

import pytest
from typer.testing import CliRunner

from analytics import store
from app.cli import app
from cudawatch.config import SmtpConfig
from reports import render
from reports.email import build_report_message, send_report_email
from tests.reports import fleet

aiosmtpd_controller = pytest.importorskip("aiosmtpd.controller")


class Inbox:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd hook name)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content or envelope.content))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server():
    inbox = Inbox()
    with socket.socket() as s:  # a free loopback port (the controller's self-check cannot use port 0)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctl = aiosmtpd_controller.Controller(inbox, hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        yield inbox, "127.0.0.1", port
    finally:
        ctl.stop()


def _parts(raw: bytes):
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    return msg, {p.get_content_type(): p for p in msg.walk() if not p.is_multipart()}, [p for p in msg.walk() if p.get_content_type() == "image/png"]


def test_report_email_is_multipart_with_inline_images(fleet_db, smtp_server, fleet_regressions):
    inbox, host, port = smtp_server
    con = store.connect(fleet_db)
    try:
        rep = render.build_report(con, fleet.START.date(), regressions=fleet_regressions, image_mode="cid")
    finally:
        con.close()
    smtp = SmtpConfig(host=host, port=port, sender="cudawatch@example.org")
    send_report_email(rep.html, rep.text, rep.images, smtp, ["gpu-team@example.org"], rep.subject)
    [(sender, rcpts, raw)] = inbox.messages
    assert sender == "cudawatch@example.org" and rcpts == ["gpu-team@example.org"]
    msg, parts, images = _parts(raw)
    assert msg.get_content_type() == "multipart/alternative"
    related = msg.get_payload()[1]
    assert related.get_content_type() == "multipart/related"
    html, text = parts["text/html"].get_content(), parts["text/plain"].get_content()
    cids = {img["Content-ID"].strip("<>") for img in images}
    referenced = set(re.findall(r'src="cid:([^"]+)"', html))
    assert referenced and referenced == cids  # every image the HTML uses travels inline, and no more
    assert len(cids) == 2 + len(fleet_regressions)  # top kernels, heatmap, one chart per regression
    for img in images:
        assert img.get_content().startswith(b"\x89PNG") and img.get_content_disposition() == "inline"
    assert "data:image" not in html  # mail clients block data: URIs; cid only
    assert "Regressions by severity" in html and "Data gaps" in html
    # hostile kernel name: escaped in HTML, inert text in the plain part
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &lt;!channel&gt;" in html
    assert "kernel:   " + fleet.EVIL in text
    assert msg["Subject"].startswith("cudawatch 2026-11-01:") and "\n" not in msg["Subject"]


def test_subject_and_text_cannot_inject_headers():
    msg = build_report_message("<p>x</p>", "x", {}, sender="a@example.org", to=["b@example.org"],
                               subject="report\r\nBcc: victim@example.org")
    raw = msg.as_bytes()
    assert b"\nBcc:" not in raw and msg["Bcc"] is None


def test_cli_report_email_to(fleet_db, smtp_server, tmp_path, monkeypatch):
    inbox, host, port = smtp_server
    monkeypatch.setenv("CUDAWATCH_SMTP_HOST", host)
    monkeypatch.setenv("CUDAWATCH_SMTP_PORT", str(port))
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", "--db", str(fleet_db), "--out", str(out), "--date", "2026-11-01", "--email-to", "ops@example.org"])
    assert res.exit_code == 0, res.output
    assert out.exists() and "emailed: ops@example.org" in res.output
    [(_, rcpts, raw)] = inbox.messages
    msg, parts, images = _parts(raw)
    assert rcpts == ["ops@example.org"] and len(images) >= 2 and "text/plain" in parts


def test_cli_email_without_smtp_host_is_a_clear_error(fleet_db, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAWATCH_SMTP_HOST", raising=False)
    res = CliRunner().invoke(app, ["report", "--db", str(fleet_db), "--out", str(tmp_path / "r.html"), "--email-to", "x@example.org"])
    assert res.exit_code == 2 and "CUDAWATCH_SMTP_HOST" in res.output


def test_email_links_the_archived_report_and_its_detail_pages(fleet_db, fleet_regressions):
    con = store.connect(fleet_db, read_only=True)
    try:
        rep = render.build_report(con, fleet.START.date(), regressions=fleet_regressions, image_mode="cid",
                                  report_url="https://reports.example/2026-11-01/report.html")
    finally:
        con.close()
    assert 'href="https://reports.example/2026-11-01/report.html"' in rep.html
    for r in fleet_regressions:
        assert f'href="https://reports.example/2026-11-01/report-{r.event_id}.html"' in rep.html
    assert "Full report with charts: https://reports.example/2026-11-01/report.html" in rep.text
    assert rep.details == {}  # detail pages are files written by write_report, not mail parts


def test_report_email_shows_an_incident_first_with_its_members(fleet_db, smtp_server, fleet_regressions):
    """A contention incident of 3 kernels (hostile job name) through a real SMTP server: the HTML
    and the text part head it once, list its members under it, and escape the job."""
    import dataclasses

    from analytics.results import Finding

    inbox, host, port = smtp_server
    evil_job = "<i>evil</i>\r\nBcc: x@evil"
    members = [dataclasses.replace(fleet_regressions[0], job=evil_job, kernel=f"kernel_{i}", kernel_id=f"k{i}",
                                   causes=(Finding("contention", 0.8, {"other_jobs_before": 0, "other_jobs_after": 1,
                                                                       "other_busy_share_before": 0.0, "other_busy_share_after": 0.2}),))
               for i in range(3)]
    con = store.connect(fleet_db)
    try:
        rep = render.build_report(con, fleet.START.date(), regressions=fleet_regressions + members, image_mode="cid")
    finally:
        con.close()
    send_report_email(rep.mail_html, rep.text, rep.images, SmtpConfig(host=host, port=port, sender="c@example.org"),
                      ["gpu-team@example.org"], rep.subject)
    [(_, rcpts, raw)] = inbox.messages
    assert rcpts == ["gpu-team@example.org"]
    msg, parts, _ = _parts(raw)
    html, text = parts["text/html"].get_content(), parts["text/plain"].get_content()
    assert html.count('data-check="incident"') == 1 and "3 regressions" in html
    assert "<i>evil</i>" not in html and "&lt;i&gt;evil&lt;/i&gt;" in html
    head = text.index("INCIDENT")
    assert "contention: 3 regressions" in text[head:text.index("\n", head)]
    assert all(text.index(f"kernel:   kernel_{i}") > head for i in range(3))
    assert "\nBcc:" not in text and "Bcc" not in msg.keys()
    assert "in 3 incidents" in rep.subject or "incident" in rep.subject
    # exactly: the open incidents, fewer than the open regressions they group
    from analytics.store.report import day_window

    ordered = render.incident_order(render.classify(fleet_regressions + members, *day_window(fleet.START.date())))
    open_incidents = [x for x in ordered if x[1] != "resolved"]
    open_regressions = [r for _, _, m in ordered for st, r in m if st != "resolved"]
    assert f" in {len(open_incidents)} incident" in rep.subject and len(open_incidents) < len(open_regressions)
