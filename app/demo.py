"""The demo: simulated fleet -> shards -> DuckDB -> analysis -> HTML report, on any machine."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

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
    regressions: list = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"shards:       {self.shards}",
            f"warehouse:    {self.db}",
            f"report:       {self.report}",
            f"ground truth: {self.ground_truth}",
            f"ingest:       {self.ingest_summary}",
            f"regressions:  {len(self.regressions)}",
        ]
        for r in self.regressions:
            causes = ", ".join(f.rule for f in r.causes) or "-"
            lines.append(f"  [{r.severity}] {r.job} {(r.kernel or r.gpu_uuid or r.series)[:70]} {r.change_label} since {r.onset:%Y-%m-%d %H:00} ({causes})")
        lines.append(f'try: cudawatch query --db {self.db} "SELECT job, count(*) FROM kernels GROUP BY job"')
        return "\n".join(lines)


def run_demo(workdir: Path, *, gpus: int = DEMO_GPUS, hours: int = DEMO_HOURS, seed: int = DEMO_SEED) -> DemoResult:
    """Run the whole pipeline in ``workdir`` (shards and warehouse from a previous demo are replaced)."""
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
    simulator.simulate_fleet(shards, gpus=gpus, hours=hours, seed=seed, start=parse_utc(DEMO_START))
    # `cudawatch ingest` then `cudawatch analyze`: every hour analysed in order by app.hour.run_hour,
    # as the hourly DAG would have.
    store = Store(db)
    with store.writer() as con:
        ingested = ingest_shards(shards, con)
        regressions = catch_up(store).regressions
    render.write_report(store, report, None)
    return DemoResult(shards, db, report, shards / "ground_truth.json", ingested.summary(), regressions)
