"""The demo: simulated fleet -> shards -> DuckDB -> analysis -> HTML report, on any machine."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from cudawatch.text import terminal

DEMO_GPUS = 16
DEMO_HOURS = 48
DEMO_SEED = 7
DEMO_START = "2026-11-01T00:00:00+00:00"


@dataclass
class DemoResult:
    shards: Path
    db: Path
    report: Path
    ground_truth: Path
    ingest_summary: str
    incidents: list = field(default_factory=list)  # analytics.incidents.Incident, the report's order

    @property
    def regressions(self) -> list:
        """Every incident's members, in the report's order."""
        return [r for inc in self.incidents for r in inc.members]

    def summary(self) -> str:
        """Paths, counts, and the incidents in the report's order with their members."""
        lines = [
            f"shards:       {self.shards}",
            f"warehouse:    {self.db}",
            f"report:       {self.report}",
            f"ground truth: {self.ground_truth}",
            f"ingest:       {self.ingest_summary}",
            f"regressions:  {len(self.regressions)} in {len(self.incidents)} incidents",
        ]
        for n, inc in enumerate(self.incidents, 1):  # incidents in the report's order, members inside
            indent = "  "
            if len(inc.members) > 1:
                lines.append(f"  incident {n} [{inc.severity}] {inc.cause_label}: {len(inc.members)} regressions, {inc.where}, "
                             f"since {inc.onset:%Y-%m-%d %H:00}")
                indent = "    "
            for r in inc.members:
                causes = ", ".join(f.rule for f in r.causes) or "-"
                lines.append(f"{indent}[{r.severity}] {r.job} · {r.metric.label} {r.change_label} since {r.onset:%Y-%m-%d %H:00} ({causes})")
        return "\n".join(terminal(line) for line in lines)

    def hints(self) -> list[str]:
        """What to run next, with a command path that works from this shell."""
        exe = command_path()
        return [f"open {self.report}",
                f"{exe} analyze --db {self.db}",
                f'{exe} query --db {self.db} "SELECT job, count(*) FROM kernels GROUP BY job"']


def command_path() -> str:
    """How to call cudawatch from this shell: ``cudawatch`` when that is on PATH and is this
    installation, else the script beside this interpreter (``.venv/bin/cudawatch``), else
    ``python -m cudawatch``."""
    import os
    import shutil
    import sys

    here = Path(sys.executable).parent / "cudawatch"
    found = shutil.which("cudawatch")
    if found and (not here.exists() or Path(found).resolve() == here.resolve()):
        return "cudawatch"
    if here.exists():
        try:
            rel = os.path.relpath(here)
        except ValueError:
            rel = str(here)
        return rel if not rel.startswith("../..") else str(here)
    return f"{sys.executable} -m cudawatch"


#: The demo's stages, in order (``progress(stage, done, total)`` is called as each advances).
STAGES = ("simulate", "ingest", "analyse", "report")


def run_demo(workdir: Path, *, gpus: int = DEMO_GPUS, hours: int = DEMO_HOURS, seed: int = DEMO_SEED,
             progress=None) -> DemoResult:
    """Run the whole pipeline in ``workdir`` (shards and warehouse from a previous demo are replaced).

    progress(stage, done, total): called when a stage (``STAGES``) starts (done 0) and as it
    advances (the analyse stage once per hour); None: quiet. Regressions are in the report's order."""
    step = progress or (lambda stage, done, total: None)
    import simulator
    from analytics.store import Store, ingest_shards
    from app.hour import catch_up
    from cudawatch.shards import parse_utc
    from reports import render

    workdir = Path(workdir)
    shards, db, report = workdir / "shards", workdir / "cudawatch.duckdb", workdir / "report.html"
    if shards.exists():
        shutil.rmtree(shards)
    db.unlink(missing_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    step("simulate", 0, 1)
    simulator.simulate_fleet(shards, gpus=gpus, hours=hours, seed=seed, start=parse_utc(DEMO_START))
    # `cudawatch ingest` then `cudawatch analyze`: every hour analysed in order by app.hour.run_hour,
    # as the hourly DAG would have.
    store = Store(db)
    with store.writer() as con:
        step("ingest", 0, 1)
        ingested = ingest_shards(shards, con)
        step("analyse", 0, None)
        done = catch_up(store, progress=lambda total, hour: step("analyse", 0, total) if hour is None else step("analyse", 1, total))
    step("report", 0, 1)
    render.write_report(store, report, None)
    from app.incident_list import report_incidents

    return DemoResult(shards, db, report, shards / "ground_truth.json", ingested.summary(),
                      report_incidents(done.regressions, done.as_of))
