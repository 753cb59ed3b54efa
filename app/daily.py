"""The daily report: rendered once into the archive, then e-mailed through Airflow's SMTP hook.

``build_daily_report`` renders the day's report a single time (``reports.render.build_report``)
and archives both forms under ``<reports>/YYYY-MM-DD/``: ``report.html`` (self-contained, charts
inline, detail pages beside it) and ``mail/`` (HTML with ``cid:`` images, plain text, subject and
one PNG per chart, named by its Content-ID). ``email_daily_report`` sends ``mail/`` with the
provider's public ``SmtpHook.send_email_smtp`` (``files`` + ``mime_subtype="related"``), so the
e-mail step needs no warehouse.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from app.settings import Settings, setting
from cudawatch.shards import atomic_file, hour_floor

log = logging.getLogger(__name__)


def report_day(interval_start: dt.datetime | str) -> dt.date:
    """The UTC day a daily run reports on: the day its data interval starts."""
    return hour_floor(interval_start).date()


def _write_atomic(path: Path, data: bytes) -> None:
    with atomic_file(path) as fh:
        fh.write(data)


def build_daily_report(interval_start: dt.datetime | str) -> str:
    """Render the day's report once and archive it (see the module docstring); returns the folder."""
    from reports import render
    from reports.email import cid_of

    cfg = Settings.resolve()
    day = report_day(interval_start)
    folder = cfg.reports / day.isoformat()
    with cfg.store().reader(queue=True) as con:
        rendered = render.build_archived_report(con, day, folder / "report.html", report_url=setting("report_url"))
    path = render.write_rendered(rendered, folder / "report.html")
    mail_dir = folder / "mail"
    mail_dir.mkdir(parents=True, exist_ok=True)
    # Each file appears whole (temporary name, then rename); images.json, which names the set the
    # e-mail step reads, goes last.
    for name, data in rendered.images.items():
        _write_atomic(mail_dir / cid_of(name), data)
    _write_atomic(mail_dir / "report.html", rendered.mail_html.encode("utf-8"))
    _write_atomic(mail_dir / "report.txt", rendered.text.encode("utf-8"))
    _write_atomic(mail_dir / "subject.txt", rendered.subject.encode("utf-8"))
    _write_atomic(mail_dir / "images.json", json.dumps(sorted(cid_of(n) for n in rendered.images)).encode("utf-8"))
    log.info("report for %s: %s (%d charts)", day, path, len(rendered.images))
    uri = setting("reports_uri")
    if uri:  # archive on object storage too (cudawatch.objectstore); the local folder stays for the e-mail step
        from cudawatch import objectstore

        objectstore.upload_tree(folder, f"{uri.rstrip('/')}/{day.isoformat()}")
    return str(folder)


def email_daily_report(interval_start: dt.datetime | str, report_dir: str) -> dict[str, Any]:
    """E-mail the archived report through Airflow's SMTP connection (``SmtpHook.send_email_smtp``).

    Connection id: ``cudawatch_smtp_conn_id`` / ``CUDAWATCH_SMTP_CONN_ID`` (default
    ``smtp_default``); recipients: ``cudawatch_email_to`` / ``CUDAWATCH_EMAIL_TO`` (comma
    separated); sender: ``cudawatch_email_from`` / ``CUDAWATCH_EMAIL_FROM``, else the connection's
    ``from_email`` extra. Without recipients nothing is sent (logged as a warning). The charts go as
    files of a ``multipart/related`` message whose Content-IDs are the ``cid:`` links of the HTML.
    """
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    from reports.escape import header

    day = report_day(interval_start)
    to = [a.strip() for a in (setting("email_to", "") or "").split(",") if a.strip()]
    if not to:
        log.warning("no recipients (cudawatch_email_to / CUDAWATCH_EMAIL_TO); report for %s not e-mailed", day)
        return {"day": day.isoformat(), "sent": False, "recipients": 0}
    mail_dir = Path(report_dir) / "mail"
    marker = mail_dir / "sent.json"
    if marker.exists():  # a retry or re-run after a successful send: do not mail the report twice
        sent = json.loads(marker.read_text())
        log.info("report for %s already e-mailed (%s); not sent again", day, sent.get("message_id"))
        return {"day": day.isoformat(), "sent": False, "already_sent": True, "recipients": len(sent.get("to", []))}
    files = [str(mail_dir / name) for name in json.loads((mail_dir / "images.json").read_text())]
    conn_id = setting("smtp_conn_id", "smtp_default")
    message_id = make_msgid(domain="cudawatch")
    with SmtpHook(smtp_conn_id=conn_id) as hook:
        hook.send_email_smtp(
            to=to, from_email=setting("email_from") or hook.from_email or "cudawatch@localhost",
            subject=header((mail_dir / "subject.txt").read_text(encoding="utf-8")),
            html_content=(mail_dir / "report.html").read_text(encoding="utf-8"),
            files=files, mime_subtype="related", custom_headers={"Message-ID": message_id},
        )
    # Recorded right after the send: a crash in between can still repeat the e-mail once.
    _write_atomic(marker, json.dumps({"message_id": message_id, "to": to}).encode("utf-8"))
    log.info("report for %s e-mailed to %d recipients via connection %s", day, len(to), conn_id)
    return {"day": day.isoformat(), "sent": True, "recipients": len(to), "message_id": message_id}
