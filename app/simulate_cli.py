"""``cudawatch simulate`` and ``cudawatch demo``: a simulated fleet, and the whole pipeline on it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import List, Optional

import typer

from app.demo import DEMO_GPUS, DEMO_HOURS, DEMO_START


def _parse_start(value: str) -> dt.datetime:
    from cudawatch.shards import parse_utc

    try:
        return parse_utc(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def simulate(
    out: Path = typer.Option(..., "--out", help="Shard root to write."),
    gpus: int = typer.Option(16, "--gpus", min=1, help="GPUs in the fleet (8 per host)."),
    hours: int = typer.Option(48, "--hours", min=1, help="Hours to simulate."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same shards)."),
    start: str = typer.Option(DEMO_START, "--start", help="First UTC hour (ISO)."),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", min=3, help="Run this many jobs of varied models, sizes and life cycles (default: the "
        "standard three-workload layout)."),
    inject: Optional[List[str]] = typer.Option(
        None, "--inject", help="Regression to inject, e.g. 'kind=kernel_slowdown,job=train-llama,hour=30,pct=8'; "
        "repeatable; 'none' for a clean fleet; default: one of each kind."),
) -> None:
    """Write realistic shards for a simulated fleet plus ground_truth.json."""
    import simulator
    from cudawatch import inputs

    inputs.or_exit(inputs.output_dir, out)
    try:
        injections = simulator.parse_injections(inject) if inject else None
        truth = simulator.simulate_fleet(out, gpus=gpus, hours=hours, seed=seed, start=_parse_start(start), injections=injections,
                                         jobs=jobs)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo(f"wrote {truth.shards} shards for {gpus} GPUs x {hours} h to {out}; {len(truth.regressions)} injected regressions in {out / 'ground_truth.json'}")


def demo(
    workdir: Path = typer.Option(Path("cudawatch-demo"), "--workdir", help="Folder for shards, warehouse and report."),
    gpus: int = typer.Option(DEMO_GPUS, "--gpus", min=8, help="GPUs in the simulated fleet (8 per host)."),
    hours: int = typer.Option(DEMO_HOURS, "--hours", min=1, help="Hours to simulate and analyse."),
) -> None:
    """Simulate a small fleet with known regressions, run the whole pipeline, write a report."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from app.analytics_cli import REGRESSION_COLUMNS, incident_rows
    from app.demo import run_demo
    from app.tables import print_rows
    from cudawatch import inputs

    inputs.or_exit(inputs.output_dir, workdir, "--workdir")
    err = Console(stderr=True)
    labels = {"simulate": f"simulating {gpus} GPUs × {hours} h", "ingest": "loading shards into DuckDB",
              "analyse": "analysing hour by hour", "report": "rendering the report"}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as bar:
        tasks: dict = {}

        def progress(stage: str, done: int, total) -> None:
            for other, t in tasks.items():  # a new stage completes the ones before it
                if other != stage and not bar.tasks[t].finished:
                    bar.update(t, completed=bar.tasks[t].total or 1, total=bar.tasks[t].total or 1)
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], advance=done, total=total)

        result = run_demo(workdir, gpus=gpus, hours=hours, progress=progress)
        for t in tasks.values():
            bar.update(t, completed=bar.tasks[t].total or 1, total=bar.tasks[t].total or 1)
    typer.echo("\n".join(result.summary().splitlines()[:6]))
    print_rows(REGRESSION_COLUMNS, incident_rows(result.incidents), "table",
               title=f"{len(result.regressions)} regressions in {len(result.incidents)} incidents (the report's order)")
    typer.echo("next:")
    for hint in result.hints():
        typer.echo(f"  {hint}")


def register(app: typer.Typer) -> None:
    app.command()(simulate)
    app.command()(demo)
