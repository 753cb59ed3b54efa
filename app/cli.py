"""The ``cudawatch`` command. Each area registers its own subcommands from a light ``cli`` module.

Heavy imports (DuckDB, scipy, CUPTI, Airflow) happen inside the commands, so ``cudawatch --help``
and the collector's commands work on a GPU host that installed only ``cudawatch[collector]``.
"""

from __future__ import annotations

import typer

from app import analytics_cli, calibrate_cli, reports_cli, simulate_cli
from collector import cli as collector_cli

app = typer.Typer(
    name="cudawatch",
    help="Continuous CUDA performance monitoring: collect, ingest, detect regressions, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _version(value: bool) -> None:
    if value:
        from cudawatch import __version__

        typer.echo(f"cudawatch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Continuous CUDA performance monitoring: collect, ingest, detect regressions, report."""


for module in (simulate_cli, analytics_cli, calibrate_cli, reports_cli, collector_cli):
    module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
