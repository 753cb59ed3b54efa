"""Warehouse commands: ingest, analyze, query, diff. Heavy imports stay inside the commands."""

from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer


def parse_ts(value: Optional[str]) -> Optional[dt.datetime]:
    from cudawatch.shards import parse_utc

    if value is None:
        return None
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


@contextmanager
def writer(db: Path):
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
def reader(db: Path):
    """A read-only connection that waits briefly while a writer holds the file."""
    from analytics.store import Store, WarehouseBusy, WarehouseOutdated

    try:
        with Store(db).reader() as con:
            yield con
    except WarehouseBusy as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3)
    except WarehouseOutdated as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)


def ingest(
    shards: Path = typer.Option(..., "--shards", help="Shard root (folder with kernels/, memcpy/, device/, health/)."),
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file (created if missing)."),
    hour: Optional[str] = typer.Option(None, "--hour", help="Only this UTC hour's partition (ISO)."),
) -> None:
    """Load new shards into the warehouse; shards already loaded are skipped, bad ones quarantined."""
    from analytics import store
    from cudawatch import inputs
    from cudawatch.text import terminal

    hour_ts = parse_ts(hour)
    inputs.or_exit(inputs.shard_root, shards)
    inputs.or_exit(inputs.writable_db, db)
    from app.tables import spinner

    with writer(db) as con, spinner(f"loading shards from {terminal(shards)}…"):
        result = store.ingest_shards(shards, con, hour=hour_ts)
    typer.echo(result.summary())
    for path, reason in result.quarantined:
        typer.echo(f"quarantined {terminal(path)}: {terminal(reason)}", err=True)
    for warning in result.warnings:
        typer.echo(f"warning: {terminal(warning)}", err=True)


def analyze(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    as_of: Optional[str] = typer.Option(None, "--as-of", help="Analyse data up to this UTC hour (ISO); default: the latest hour loaded."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Analyse every hour not analysed yet (baselines, regressions, root causes), oldest first, as
    the hourly DAG would have; print the regressions reported in the lookback up to --as-of, in
    the daily report's order."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from analytics.store import LockTimeout, Store
    from app import tables
    from app.hour import catch_up
    from cudawatch import inputs

    fmt = "json" if as_json else tables.check_format(fmt)
    as_of_ts = parse_ts(as_of)
    inputs.or_exit(inputs.existing_db, db)
    err = Console(stderr=True)
    with Progress(TextColumn("analysing {task.fields[hour]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=fmt != "table" and not err.is_terminal) as bar:
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
    from analytics.store.outbox import incident_ids

    with reader(db) as con:  # the ids the alerts used, so analyze names incidents as Slack and the webhook did
        known = incident_ids(con)
    incidents = report_incidents(done.regressions, done.as_of, known)
    payload = analyze_json(incidents)
    if fmt == "json":
        typer.echo(json.dumps(payload, indent=2))
        return
    regressions = payload["regressions"]
    if done.as_of is not None and fmt == "table":
        err.print(f"analysed {len(done.hours)} hours up to {done.as_of:%Y-%m-%d %H:00}" +
                  ("" if done.hours else " (all analysed before)"))
    tables.print_rows(REGRESSION_COLUMNS, incident_rows(incidents), fmt, raw=regressions,
                      title=f"{len(regressions)} regressions in {len(incidents)} incident{'s' if len(incidents) != 1 else ''}")
    if not regressions and fmt == "table":
        with reader(db) as con:
            why = why_no_regressions(con)
        if why:
            typer.echo(why, err=True)


#: The columns of a regression list in the terminal (analyze, demo): the report's "At a glance".
from app.tables import Col  # noqa: E402

REGRESSION_COLUMNS = (
    Col("incident", "incident", "time", optional=True), Col("severity", "severity", "time"), Col("job", "job", "name", max_width=14), Col("what", "what changed", "name", "kernel_id", prefix="metric"),
    Col("change", "change", "num"), Col("since", "since (UTC)", "time"), Col("cause", "top cause", "name", max_width=12, optional=True),
)


def incident_rows(incidents) -> list[dict]:
    """The terminal rows of incidents' members, in order, each with its incident (``#1 (12)``)."""
    return [{**regression_row(r), "incident": incident_cell(n, inc)} for n, inc in enumerate(incidents, 1) for r in inc.members]


def regression_row(r) -> dict:
    """One regression as the terminal shows it: the metric named, the GPU as host:index."""
    if r.kernel:
        what = r.kernel
    elif r.gpu_uuid:
        what = f"GPU {r.gpu_label}"
    elif r.series.startswith("memcpy_") and r.signature:
        what = f"{r.signature} copies"
    else:
        what = "the job"
    top = r.top_cause
    return {"severity": r.severity, "job": r.job, "metric": r.metric.label, "what": what, "kernel_id": r.kernel_id,
            "change": r.size.change, "since": f"{r.onset:%m-%d %H:00}", "cause": top.rule.replace("_", " ") if top else "-"}


from app.incident_list import analyze_json, incident_cell, report_incidents  # noqa: E402


def why_no_regressions(con) -> str | None:
    """Why a warehouse gives no regressions, when the reason is too little history."""
    from analytics.lifecycle import DetectConfig
    from analytics.store.report import data_extent

    first, last = data_extent(con)
    if first is None:
        return "no regressions: the warehouse has no kernel or device data yet (run `cudawatch ingest`)"
    have = int((last - first).total_seconds() // 3600) + 1
    need = DetectConfig().min_points
    if have < need:
        return (f"no regressions: the detector needs >= {need} h of history per series; this warehouse has {have} h "
                f"({first:%Y-%m-%d %H:00} to {last:%Y-%m-%d %H:00} UTC). Simulate or collect longer (e.g. --hours 48).")
    return None


def query(
    sql: str = typer.Argument(..., help="SQL to run (read-only)."),
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file, or a partitioned warehouse's directory."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    limit: int = typer.Option(200, "--limit", help="Rows to print in table format."),
) -> None:
    """Run read-only ad-hoc SQL on the warehouse."""
    from analytics import store
    from cudawatch import inputs

    inputs.or_exit(inputs.readable_warehouse, db)
    try:
        result = store.query(db, sql)
    except store.QueryError as exc:  # refused, or a DuckDB error: one line, not a traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    except store.WarehouseBusy as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3)
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
        import pyarrow.types as pat
        from rich import box
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        from cudawatch.text import terminal

        # Fits the terminal: numbers are never cut, text wraps (the whole values: --format csv|json).
        table = Table(show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False)
        for field in result.schema:
            number = pat.is_integer(field.type) or pat.is_floating(field.type) or pat.is_decimal(field.type)
            table.add_column(Text(terminal(field.name)), justify="right" if number else "left", no_wrap=number, overflow="fold")
        for row in result.slice(0, limit).to_pylist():
            table.add_row(*(Text("" if v is None else terminal(v)) for v in row.values()))
        Console().print(table)
        if result.num_rows > limit:
            typer.echo(f"... {result.num_rows - limit} more rows (use --format csv)")
    else:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv or json")


def diff(
    db: Path = typer.Option(..., "--db", help="DuckDB warehouse file."),
    job: Optional[str] = typer.Option(None, "--job", help="Job to compare (default with --event: the event's job)."),
    before: Optional[str] = typer.Option(None, "--before", help="Start of the 'before' window (ISO hour)."),
    after: Optional[str] = typer.Option(None, "--after", help="Start of the 'after' window (ISO hour)."),
    hours: int = typer.Option(24, "--hours", help="Length of each window in hours."),
    event: Optional[str] = typer.Option(None, "--event", help="A regression's event_id: its job, the window before and after its onset."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
) -> None:
    """Trace diff of a job between two windows: kernels added, removed, slower, faster.

    With --event, the line above the table is the regression's own size (as in the report); the
    table's changes are the two windows' per-launch means, labelled as such."""
    from analytics.store import diff as trace_diff
    from analytics.store.regressions import load_regressions
    from app import tables
    from cudawatch import inputs
    from cudawatch.text import shorten_name, terminal

    tables.check_format(fmt)
    before_ts, after_ts = parse_ts(before), parse_ts(after)
    inputs.or_exit(inputs.existing_db, db)
    reg = None
    with reader(db) as con:
        if event is not None:
            reg = next((r for r in load_regressions(con) if r.event_id == event), None)
            if reg is None:
                typer.echo(f"error: no regression with event_id {event!r} (see `cudawatch analyze --format json`)", err=True)
                raise typer.Exit(2)
            from analytics.store.report import data_extent

            first, last = data_extent(con)
            if last is not None and first is not None:  # equal windows that both hold data
                hours = max(1, min(hours, int((last - reg.onset).total_seconds() // 3600) + 1,
                                   int((reg.onset - first).total_seconds() // 3600)))
            job = job or reg.job
            after_ts = after_ts or reg.onset
            before_ts = before_ts or (reg.onset - dt.timedelta(hours=hours))
        if job is None or before_ts is None or after_ts is None:
            typer.echo("error: give --job, --before and --after, or --event", err=True)
            raise typer.Exit(2)
        try:
            result = trace_diff.trace_diff(con, job, before_ts, after_ts, hours=hours)
        except ValueError as exc:  # unknown job, overlapping windows
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
    raw = result.to_pylist()
    if fmt != "table":
        tables.print_rows(DIFF_COLUMNS, raw, fmt)
        return
    if reg is not None:
        typer.echo(f"regression {reg.event_id}: {reg.size.text} since {reg.onset:%Y-%m-%d %H:00} UTC "
                   f"({shorten_name(reg.kernel, reg.kernel_id) if reg.kernel else terminal(reg.gpu_label or reg.job)})")
    title = (f"job {terminal(job)}: {hours} h from {before_ts:%m-%d %H:00} vs {hours} h from {after_ts:%m-%d %H:00} UTC; "
             "µs per launch and Δ/launch are the two windows' means")
    tables.print_rows(DIFF_COLUMNS, [diff_row(r) for r in raw], "table", title=title)


from app.tables import Col as _Col  # noqa: E402

DIFF_COLUMNS = (
    _Col("kernel", "kernel", "name", "kernel_id"), _Col("status", "status", "time"),
    _Col("us_before", "µs before", "num"), _Col("us_after", "µs after", "num"),
    _Col("change", "Δ/launch", "num"), _Col("gpu_s", "GPU-s Δ", "num"),
    _Col("configs", "configs", "num", optional=True),
)


def diff_row(row: dict) -> dict:
    from analytics.results import fmt_value

    def us(ns):
        return "–" if ns is None else fmt_value(ns / 1e3)

    change = row["change_pct"]
    return {"kernel": row["kernel"], "kernel_id": row["kernel_id"], "status": row["status"],
            "us_before": us(row["mean_ns_before"]), "us_after": us(row["mean_ns_after"]),
            "change": "–" if change is None else f"{change:+.1f}%", "gpu_s": f"{row['delta_gpu_s']:+,.1f}",
            "configs": f"{row['configs_before']} → {row['configs_after']}"}


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(analyze)
    app.command()(query)
    app.command()(diff)
