"""GPU-host commands: collect, agent, doctor. Must import nothing heavy (no CUPTI, NVML, DuckDB)."""

from __future__ import annotations

import re
from typing import List, Optional

import typer


def _seconds(text: str) -> float:
    """Parse ``1s``, ``500ms``, ``2m`` or a plain number of seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration like 1s, 500ms or 2m")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise typer.BadParameter("the interval must be positive")
    return value


def register(app: typer.Typer) -> None:
    """Register ``collect``, ``agent`` and ``doctor`` on the ``cudawatch`` app."""

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def collect(
        command: List[str] = typer.Argument(None, help="The program to run, after --: e.g. -- python train.py"),
        job: Optional[str] = typer.Option(None, "--job", help="Job label (default: CUDAWATCH_JOB, Slurm/K8s job, else the script name)."),
        out: Optional[str] = typer.Option(None, "--out", help="Shard root (default: CUDAWATCH_SHARDS or ./shards)."),
    ) -> None:
        """Run a Python CUDA program with the CUPTI collector injected; exits with the program's status."""
        import os

        from collector.launcher import run

        try:
            rc = run(list(command or []), job=job, out=out or os.environ.get("CUDAWATCH_SHARDS") or "shards")
        except ValueError as exc:
            typer.echo(f"cudawatch collect: {exc}", err=True)
            raise typer.Exit(2)
        raise typer.Exit(rc)

    @app.command()
    def agent(
        port: int = typer.Option(8080, "--port", help="Port of the Prometheus /metrics endpoint (0: any free port)."),
        interval: str = typer.Option("1s", "--interval", envvar="MONITOR_INTERVAL", help="Sampling interval, e.g. 1s or 500ms."),
        out: Optional[str] = typer.Option(None, "--out", envvar="CUDAWATCH_SHARDS", help="Shard root for device shards (omit: metrics only)."),
        addr: str = typer.Option("0.0.0.0", "--addr", help="Address to listen on."),
        duration: Optional[str] = typer.Option(None, "--duration", help="Stop after this long (default: run until SIGTERM)."),
        pm_sampling: Optional[int] = typer.Option(None, "--pm-sampling", help="Also run CUPTI PM sampling on this GPU index (SM/DRAM throughput)."),
    ) -> None:
        """Node agent: NVML/GPM sampling to device shards and Prometheus /metrics."""
        import signal

        from collector.agent import Agent

        a = Agent(out, _seconds(interval), pm_device=pm_sampling)
        if a.sampler is None:
            typer.echo(f"cudawatch agent: NVML unavailable ({a.nvml_error}); serving health metrics only", err=True)
        bound = a.serve(port, addr)
        typer.echo(f"cudawatch agent: /metrics on {addr}:{bound}, sampling every {a.interval_s}s" + (f", shards in {out}" if out else ""), err=True)
        signal.signal(signal.SIGTERM, lambda *_: a.stop())
        try:
            a.run(_seconds(duration) if duration else None)
        except KeyboardInterrupt:
            pass
        finally:
            a.close()

    @app.command()
    def doctor() -> None:
        """Check driver, CUDA, CUPTI, NVML, GPM support, counter permissions and config."""
        from collector.doctor import run_checks

        checks = run_checks()
        for c in checks:
            typer.echo(f"[{c.status:>4}] {c.name}: {c.detail}")
        if any(c.status == "fail" and c.name in ("CUDA driver", "NVML") for c in checks):
            typer.echo("No usable GPU on this host. To see the whole pipeline on a simulated fleet (no GPU needed): "
                       "cudawatch demo", err=True)
        raise typer.Exit(1 if any(c.status == "fail" for c in checks) else 0)
