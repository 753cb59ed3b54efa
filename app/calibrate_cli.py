"""``cudawatch calibrate``: the sequential detector's thresholds set on the fleet's own history
(analytics.fleet_calibration); every later hourly run (CLI or Airflow) uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def calibrate(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    days: int = typer.Option(14, "--days", min=1, help="Days of hourly runs to replay (each with its lookback before it)."),
    target: float = typer.Option(0.75, "--target", min=0.01, help="False alerts per 1,000 regression-free series-days."),
    as_of: Optional[str] = typer.Option(None, "--as-of", help="Last replayed UTC hour (ISO); default: the latest hour loaded."),
    min_series_days: float = typer.Option(10_000, "--min-series-days", help="Refuse a smaller clean history."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the thresholds without storing them."),
) -> None:
    """Replay the hourly path over the warehouse's regression-free history and store one GLR
    threshold per window length for --target false alerts per 1,000 series-days."""
    from analytics import fleet_calibration
    from analytics.store import hours
    from analytics.store import thresholds as stored
    from app.analytics_cli import parse_ts, reader, writer
    from cudawatch import inputs

    inputs.or_exit(inputs.existing_db, db)
    end = parse_ts(as_of)
    with reader(db) as con:  # read, then let go: the replay can take hours on a big fleet
        end = end or hours.latest_hour(con)
        if end is None:
            typer.echo("error: the warehouse holds no hourly data yet", err=True)
            raise typer.Exit(2)
        hist = fleet_calibration.load_history(con, end, days=days)
    try:
        c = fleet_calibration.calibrate_history(hist, target=target, min_series_days=min_series_days)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    h = ", ".join("–" if x == float("inf") else f"{x:.2f}" for x in c.thresholds)
    typer.echo(f"{c.series} series, {c.series_days:,.0f} clean series-days up to {c.as_of:%Y-%m-%d %H:00} UTC; "
               f"target {c.target:g}, {c.rate:.2f} false alerts per 1,000 series-days on this history (tail p {c.tail_p:.1e})")
    typer.echo(f"thresholds (window 1..{len(c.thresholds)} h): {h}")
    if dry_run:
        return
    with writer(db) as con:
        stored.save(con, c)
    typer.echo(f"stored for method {c.method}: the next hourly runs use them")


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
