"""The daily report as e-mail: one MIME message, sent with smtplib (CLI) or Airflow's SmtpHook.

Structure (RFC 2387 multipart/related inside RFC 2046 multipart/alternative)::

    multipart/alternative
    ├── text/plain                      the plain-text report
    └── multipart/related
        ├── text/html                   the HTML report, images as <img src="cid:NAME@cudawatch.png">
        └── image/png  (Content-ID: <NAME@cudawatch.png>, inline)   one per chart

Mail clients that show HTML pick the related part; the others show the text. Images travel
inside the message, so the report renders offline and in clients that block remote images.
"""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Iterable, Mapping

from cudawatch.config import ConfigError, SmtpConfig
from reports.escape import header


def cid_of(name: str) -> str:
    """Content-ID of the chart ``name`` in the e-mail, also the file name it is attached under
    (``<name>@cudawatch.png``: a valid msg-id, and a file name with its type)."""
    return f"{name}@cudawatch.png"


class EmailError(RuntimeError):
    """The report could not be handed to the SMTP server; the message says which step failed."""


def build_report_message(
    html: str,
    text: str,
    images: Mapping[str, bytes],
    *,
    sender: str,
    to: Iterable[str],
    subject: str,
) -> EmailMessage:
    """Build the multipart e-mail of a report.

    html: the report rendered with ``image_mode="cid"`` (``reports.render.build_report``); text:
    the plain-text version; images: PNG bytes by name, referenced in the HTML as
    ``cid:<name>@cudawatch.png`` (``cid_of``); to: recipient addresses. The subject is stripped of line breaks.
    """
    recipients = [a.strip() for a in to if a and a.strip()]
    if not recipients:
        raise ConfigError("no e-mail recipient (pass --email-to or set CUDAWATCH_EMAIL_TO)")
    msg = EmailMessage()
    msg["Subject"] = header(subject)
    msg["From"] = header(sender)
    msg["To"] = ", ".join(header(a) for a in recipients)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain="cudawatch")
    msg.set_content(text, subtype="plain", charset="utf-8")
    msg.add_alternative(html, subtype="html", charset="utf-8")
    html_part = msg.get_payload()[1]
    for name, data in images.items():
        html_part.add_related(data, maintype="image", subtype="png", cid=f"<{cid_of(name)}>",
                              disposition="inline", filename=f"{name}.png")
    return msg


def send_message(msg: EmailMessage, smtp: SmtpConfig, *, timeout: float = 30.0) -> None:
    """Send ``msg`` through ``smtp`` (STARTTLS and login when configured)."""
    if not smtp.host:
        raise ConfigError("CUDAWATCH_SMTP_HOST is not set: no SMTP server to send the report through")
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=timeout) as client:
            if smtp.starttls:
                client.starttls(context=ssl.create_default_context())
            if smtp.user:
                client.login(smtp.user, smtp.password or "")
            client.send_message(msg)
    except (smtplib.SMTPException, OSError) as exc:
        raise EmailError(f"sending the report via {smtp.host}:{smtp.port} failed: {exc}") from exc


def send_report_email(
    html: str,
    text: str,
    images: Mapping[str, bytes],
    smtp: SmtpConfig,
    to: Iterable[str] | None,
    subject: str,
) -> EmailMessage:
    """Build and send the report e-mail; ``to`` defaults to ``smtp.to`` (CUDAWATCH_EMAIL_TO).
    Returns the message that was sent."""
    msg = build_report_message(html, text, images, sender=smtp.sender, to=list(to or smtp.to), subject=subject)
    send_message(msg, smtp)
    return msg
