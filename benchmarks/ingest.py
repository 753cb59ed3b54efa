"""Ingest speed: `cudawatch ingest` against the plain DuckDB load a user would write by hand.

    python benchmarks/ingest.py --gpus 128 --hours 24 [--reps 3]

Simulates a fleet once, then in the same run loads it (a) with ``analytics.store.ingest_shards``
(validation of every shard against the contract, ledger, quarantine, one transaction per batch)
and (b) with one ``CREATE TABLE ... AS SELECT * FROM read_parquet('<table>/**/*.parquet')`` per
table, which does none of that. Also times a second, no-op ingest (idempotency check only).
Reports wall seconds, rows/s and the ratio (a)/(b). With ``--reps N`` the two loads alternate N
times into fresh files (plain first), each repetition's pair is printed, and the table uses the
fastest of each (on a shared machine the pairs show how far the load moved the ratio).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import tempfile
import time
from pathlib import Path

import duckdb

from analytics import store
from cudawatch import shards as sh
import simulator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=None, help="simulated jobs (default: the simulator's)")
    ap.add_argument("--reps", type=int, default=1, help="alternate the two loads this many times")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "shards"
        t = time.perf_counter()
        simulator.simulate_fleet(root, gpus=args.gpus, hours=args.hours, seed=args.seed,
                                 start=dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc),
                                 **({"jobs": args.jobs} if args.jobs else {}))
        sim_s = time.perf_counter() - t
        files = sh.list_shards(root)
        size = sum(f.stat().st_size for f in files)

        pairs = []
        for rep in range(args.reps):
            for f in Path(tmp).glob("*.duckdb*"):
                f.unlink()
            plain = duckdb.connect(str(Path(tmp) / "plain.duckdb"))
            t = time.perf_counter()
            for table in sh.SCHEMAS:
                plain.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{root}/{table}/**/*.parquet', hive_partitioning = false)")
            plain.execute("CHECKPOINT")
            theirs = time.perf_counter() - t
            plain_rows = sum(plain.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in sh.SCHEMAS)
            plain.close()
            con = store.connect(Path(tmp) / "cw.duckdb")
            t = time.perf_counter()
            result = store.ingest_shards(root, con)
            con.execute("CHECKPOINT")
            ours = time.perf_counter() - t
            t = time.perf_counter()
            store.ingest_shards(root, con)
            noop = time.perf_counter() - t
            con.close()
            pairs.append((ours, theirs, noop))
            print(f"rep {rep + 1}: ingest {ours:.2f} s, plain {theirs:.2f} s, ratio {ours / theirs:.2f}, load {os.getloadavg()[0]:.1f}", flush=True)
        rows = sum(result.rows.values())
        ours, theirs, noop = min(p[0] for p in pairs), min(p[1] for p in pairs), min(p[2] for p in pairs)
    assert plain_rows == rows, (plain_rows, rows)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, duckdb {duckdb.__version__}, {dt.date.today()}")
    print(f"fleet: {args.gpus} GPUs x {args.hours} h, {len(files)} shards, {size / 1e6:.1f} MB, {rows:,} rows (simulated in {sim_s:.1f} s)")
    print("| loader | wall s | rows/s | ratio |")
    print("|---|---|---|---|")
    print(f"| cudawatch ingest (validate + ledger + quarantine) | {ours:.2f} | {rows / ours:,.0f} | {ours / theirs:.2f} |")
    print(f"| plain DuckDB read_parquet, one CTAS per table | {theirs:.2f} | {rows / theirs:,.0f} | 1.00 |")
    print(f"| cudawatch ingest again (nothing new) | {noop:.2f} | - | - |")


if __name__ == "__main__":
    main()
