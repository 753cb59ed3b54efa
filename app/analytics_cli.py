"""Warehouse commands: ingest, analyze, query, diff. Heavy imports stay inside the commands."""

from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer


def _parse_ts(value: Optional[str]) -> Optional[dt.datetime]:
    from cudawatch.shards import parse_utc

    if value is None:
        return None
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


@contextmanager
def _writer(db: Path):
    """A writable connection under the warehouse's writer lock (analytics.store.Store), shared
    with the Airflow tasks: a command run by hand waits for a running task instead of failing on
    DuckDB's file lock."""
    from analytics.store import LockTimeout, Store

    try:
        with Store(db).writer() as con:
            yield con
    except LockTimeout as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3)


@contextmanager
def _reader(db: Path):
    """A read-only connection that waits briefly while a writer holds the file."""
    from analytics.store import Store, WarehouseBusy

    try:
        with Store(db).reader() as con:
            yield con
    except WarehouseBusy as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3)


def ingest(
    shards: Path = typer.Option(..., "--shards", help="Shard root (folder with kernels/, memcpy/, device/, health/)."),
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file (created if missing)."),
    hour: Optional[str] = typer.Option(None, "--hour", help="Only this UTC hour's partition (ISO)."),
) -> None:
    """Load new shards into the warehouse; shards already loaded are skipped, bad ones quarantined."""
    from analytics import store

    hour_ts = _parse_ts(hour)
    with _writer(db) as con:
        result = store.ingest_shards(shards, con, hour=hour_ts)
    typer.echo(result.summary())
    for path, reason in result.quarantined:
        typer.echo(f"quarantined {path}: {reason}", err=True)


def analyze(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    as_of: Optional[str] = typer.Option(None, "--as-of", help="Analyse data up to this UTC hour (ISO); default: the latest hour loaded."),
    as_json: bool = typer.Option(False, "--json", help="Print regressions as a JSON list."),
) -> None:
    """Analyse every hour not analysed yet (baselines, regressions, root causes), oldest first, as
    the hourly DAG would have; print the regressions reported in the lookback up to --as-of."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from analytics.store import LockTimeout, Store
    from app.hour import catch_up

    as_of_ts = _parse_ts(as_of)
    err = Console(stderr=True)
    with Progress(TextColumn("analysing {task.fields[hour]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=as_json and not err.is_terminal) as bar:
        task = bar.add_task("hours", total=None, hour="")

        def progress(total: int, hour) -> None:
            if hour is None:
                bar.update(task, total=total)
            else:
                bar.update(task, advance=1, hour=f"{hour:%Y-%m-%d %H:00}")

        try:
            done = catch_up(Store(db), as_of_ts, progress=progress)
        except LockTimeout as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(3)
    regressions = done.regressions
    if done.as_of is not None and not as_json:
        err.print(f"analysed {len(done.hours)} hours up to {done.as_of:%Y-%m-%d %H:00}" +
                  ("" if done.hours else " (all analysed before)"))
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in regressions], indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{len(regressions)} regressions")
    for col in ("severity", "status", "job", "kernel / series", "onset", "change", "p", "causes"):
        table.add_column(col)
    for r in regressions:
        table.add_row(r.severity, r.status, r.job, (r.kernel or r.gpu_uuid or r.series)[:60], f"{r.onset:%Y-%m-%d %H:00}",
                      r.change_label, f"{r.p_value:.1e}", ", ".join(f.rule for f in r.causes))
    Console().print(table)


def query(
    sql: str = typer.Argument(..., help="SQL to run (read-only)."),
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    limit: int = typer.Option(200, "--limit", help="Rows to print in table format."),
) -> None:
    """Run read-only ad-hoc SQL on the warehouse."""
    from analytics import store

    try:
        result = store.query(db, sql)
    except Exception as exc:  # duckdb errors: show the message, not a traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    _print_arrow(result, fmt, limit)


def _json_default(value):
    from decimal import Decimal

    if isinstance(value, Decimal):  # DuckDB sums of BIGINT arrive as decimals
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def _print_arrow(result, fmt: str, limit: int) -> None:
    import sys

    if fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(result, sys.stdout.buffer)
    elif fmt == "json":
        typer.echo(json.dumps(result.to_pylist(), default=_json_default, indent=2))
    elif fmt == "table":
        from rich.console import Console
        from rich.table import Table

        table = Table(show_lines=False)
        for name in result.column_names:
            table.add_column(name)
        for row in result.slice(0, limit).to_pylist():
            table.add_row(*("" if v is None else str(v) for v in row.values()))
        Console(width=200).print(table)
        if result.num_rows > limit:
            typer.echo(f"... {result.num_rows - limit} more rows (use --format csv)")
    else:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv or json")


def diff(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    job: str = typer.Option(..., "--job", help="Job to compare."),
    before: str = typer.Option(..., "--before", help="Start of the 'before' window (ISO hour)."),
    after: str = typer.Option(..., "--after", help="Start of the 'after' window (ISO hour)."),
    hours: int = typer.Option(24, "--hours", help="Length of each window in hours."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
) -> None:
    """Trace diff of a job between two windows: kernels added, removed, slower, faster."""
    from analytics.store import diff as trace_diff
    from analytics import store

    before_ts, after_ts = _parse_ts(before), _parse_ts(after)
    with _reader(db) as con:
        try:
            result = trace_diff.trace_diff(con, job, before_ts, after_ts, hours=hours)
        except ValueError as exc:  # unknown job, overlapping windows
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
    _print_arrow(result, fmt, 200)


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(analyze)
    app.command()(query)
    app.command()(diff)
