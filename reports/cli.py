"""Report and alert commands."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def report(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    out: Path = typer.Option(..., "--out", help="HTML file to write."),
    date: Optional[str] = typer.Option(None, "--date", help="UTC day to report (YYYY-MM-DD); default: the last day with data."),
) -> None:
    """Write the HTML report."""
    from reports import render

    path = render.write_report(db, out, date)
    typer.echo(f"report: {path}")


def register(app: typer.Typer) -> None:
    app.command()(report)
