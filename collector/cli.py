"""GPU-host commands: collect, agent, doctor. Must import nothing heavy (no CUPTI, NVML, DuckDB)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Register the collector's commands (filled in by the collector work, issue 3)."""
