"""Two simulated clusters for the partition tests: each its own shard root, its own hosts and
jobs (every job's rows in one partition, as a cluster or job-hash partition keeps them), each
with a kernel slowdown, so single and partitioned warehouses have regressions to agree on."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

UTC = dt.timezone.utc
START = dt.datetime(2026, 11, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
HOURS = 29
ONSET = 24
CLUSTERS = (("east", 1), ("west", 2))
#: Size of each cluster's kernel slowdown. Each warehouse pools its own drift estimate, so single and
#: partitioned p-values differ (CONTENT leaves them out); the step must pass the change points'
#: max_pvalue (analytics.lifecycle.HOURLY_MAX_PVALUE) at the same run in both. At 25 % its third run
#: read p 4.6e-8 (single) and 5.7e-8 (partition): at 5e-8 the partition found it a run later; at
#: 50 % both read about 6e-9, under 1e-8 (the value since 2026-12-06) by a factor of only ~1.7.
SLOWDOWN_PCT = 50


def _prefix_jobs(root: Path, prefix: str) -> None:
    """Rename every job to ``<prefix>-<job>`` in place (the simulator names jobs the same in every
    fleet; two real clusters run different jobs)."""
    for path in root.rglob("*.parquet"):
        table = pq.read_table(path)
        if "job" not in table.column_names:
            continue
        i = table.column_names.index("job")
        job = pc.binary_join_element_wise(pa.scalar(prefix + "-"), table.column(i), "")
        table = table.set_column(i, table.schema.field(i), job.cast(table.schema.field(i).type))
        pq.write_table(table, path)


def make_clusters(base: Path, *, gpus: int = 8, hours: int = HOURS) -> dict[str, Path]:
    """name -> shard root of each cluster, simulated from START for ``hours`` hours."""
    from simulator import simulate_fleet
    from simulator.injections import Injection

    roots = {}
    for name, seed in CLUSTERS:
        root = base / name
        simulate_fleet(root, gpus=gpus, hours=hours, seed=seed, start=START,
                       injections=[Injection("kernel_slowdown", hour=ONSET, pct=SLOWDOWN_PCT)])
        _prefix_jobs(root, name)
        roots[name] = root
    return roots


#: Content of the warehouse, order-free (a partitioned view records each analysed hour once per partition).
CONTENT = {
    # p_value left out: the detector pools its drift estimate over the warehouse's series
    # (analytics.trend.estimate_drift), so a partition's p-values use its own fleet's drift.
    "regressions": "SELECT * EXCLUDE (p_value) FROM regressions ORDER BY event_id",
    "significant": "SELECT event_id, p_value < 1e-6 FROM regressions ORDER BY event_id",
    "findings": "SELECT event_id, rule, confidence, evidence, recommendation FROM findings ORDER BY ALL",
    "baselines": "SELECT count(*), sum(hash(columns(*))::HUGEINT) FROM baselines",
    "raw": "SELECT (SELECT count(*) FROM kernels), (SELECT count(*) FROM memcpy), (SELECT count(*) FROM device), "
           "(SELECT count(*) FROM health), (SELECT count(*) FROM shard_ledger), (SELECT count(DISTINCT hour) FROM analysed_hours), (SELECT count(*) FROM data_gaps)",
    "kernel_hourly": "SELECT count(*), sum(hash(columns(*))::HUGEINT) FROM kernel_hourly",
}


def content(con) -> dict:
    return {name: con.execute(sql).fetchall() for name, sql in CONTENT.items()}
