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
        truth = simulator.simulate_fleet(out, gpus=gpus, hours=hours, seed=seed, start=_parse_start(start), injections=injections)
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
    from app.demo import run_demo
    from cudawatch import inputs

    inputs.or_exit(inputs.output_dir, workdir, "--workdir")
    result = run_demo(workdir, gpus=gpus, hours=hours)
    typer.echo(result.summary())


def register(app: typer.Typer) -> None:
    app.command()(simulate)
    app.command()(demo)
