"""Report and alert commands: ``cudawatch report`` and ``cudawatch alert``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def report(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    out: Path = typer.Option(..., "--out", help="HTML file to write (detail pages are written beside it)."),
    date: Optional[str] = typer.Option(None, "--date", help="UTC day to report (YYYY-MM-DD); default: the last day with data."),
    email_to: Optional[List[str]] = typer.Option(
        None, "--email-to", help="Also e-mail the report to this address (repeatable); SMTP from CUDAWATCH_SMTP_* env."),
) -> None:
    """Write the HTML report, and e-mail it when --email-to is given."""
    from analytics.store import LockTimeout, WarehouseBusy, WarehouseOutdated, open_store
    from cudawatch import inputs
    from cudawatch.config import ConfigError, SmtpConfig
    from reports import render

    inputs.or_exit(inputs.readable_warehouse, db)
    inputs.or_exit(inputs.output_file, out)
    try:
        smtp = SmtpConfig.from_env() if email_to else None
        if smtp is not None and not smtp.host:
            raise ConfigError("--email-to needs CUDAWATCH_SMTP_HOST (and _PORT/_USER/_PASSWORD/_STARTTLS as needed)")
        if not db.exists():
            raise FileNotFoundError(f"warehouse {db} does not exist (run `cudawatch ingest` first)")
        # Rendered once: the file, its detail pages and the e-mail version come from one build.
        from app.tables import spinner

        with open_store(db).reader(queue=True) as con, spinner("rendering the report and its detail pages…"):
            rendered = render.build_archived_report(con, render.parse_day(date, con), out)
        path = render.write_rendered(rendered, out)
    except (ConfigError, render.ReportError, FileNotFoundError, WarehouseOutdated) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (LockTimeout, WarehouseBusy) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from exc
    typer.echo(f"report: {path}")
    if smtp is not None:
        from reports.email import EmailError, send_report_email

        try:
            send_report_email(rendered.mail_html, rendered.text, rendered.images, smtp, email_to, rendered.subject)
        except (EmailError, ConfigError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        typer.echo(f"emailed: {', '.join(email_to)} via {smtp.host}:{smtp.port} ({rendered.subject})")


def alert(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file (holds the alert outbox)."),
    report_url: Optional[str] = typer.Option(None, "--report-url", help="Link to the report (default CUDAWATCH_REPORT_URL)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Send failed alerts again (e.g. after fixing a webhook URL)."),
) -> None:
    """Send new regressions to Slack (CUDAWATCH_SLACK_WEBHOOK_URL) and the JSON webhook
    (CUDAWATCH_WEBHOOK_URL); alerts that could not be delivered are retried by the next run."""
    from analytics.store import LockTimeout, Store
    from cudawatch.config import AlertConfig, ConfigError
    from reports.alerts import send_new_alerts

    try:
        config = AlertConfig.from_env()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not (config.slack_webhook_url or config.webhook_url):
        typer.echo("error: no alert channel: set CUDAWATCH_SLACK_WEBHOOK_URL and/or CUDAWATCH_WEBHOOK_URL", err=True)
        raise typer.Exit(2)
    from cudawatch import inputs

    inputs.or_exit(inputs.existing_db, db)
    try:
        with Store(db).writer() as con:
            if retry_failed:
                import datetime as dt

                from analytics.store import outbox

                outbox.ensure_outbox(con)
                typer.echo(f"requeued {outbox.requeue_failed(con, dt.datetime.now(dt.timezone.utc))} failed alerts")
            result = send_new_alerts(con, config, report_url=report_url)
    except LockTimeout as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from exc
    typer.echo(result.summary())
    for err in result.errors:
        typer.echo(f"  {err}", err=True)
    if result.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(report)
    app.command()(alert)
