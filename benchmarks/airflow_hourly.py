"""Time the hourly DAG's steps (app.steps) on a simulated fleet, outside Airflow.

    python benchmarks/airflow_hourly.py --gpus 64 --hours 48

Simulates the fleet, loads all hours but the last as history, then runs each hourly step for the
last hour (as the DAG's tasks do: each opens and closes the warehouse under the writer lock) and
prints seconds per step, then re-runs the hour (the idempotent path). Airflow's own per-task
overhead comes on top (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time
import sys
from pathlib import Path

# `python benchmarks/airflow_hourly.py` puts benchmarks/ first on sys.path, where benchmarks/reports.py
# would shadow the reports package: put the repository first instead.
REPO = Path(__file__).resolve().parents[1]
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hours", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cudawatch-bench-"))
    os.environ.update(CUDAWATCH_SHARDS=str(work / "shards"), CUDAWATCH_DB=str(work / "cudawatch.duckdb"),
                      CUDAWATCH_REPORTS=str(work / "reports"))
    from analytics import store
    from analytics.store import Store
    from analytics.store.regressions import OPEN, load_regressions
    from app import steps
    from simulator import simulate_fleet

    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    t = time.perf_counter()
    simulate_fleet(work / "shards", gpus=args.gpus, hours=args.hours, seed=args.seed, start=start)
    sim_s = time.perf_counter() - t
    con = store.connect(work / "cudawatch.duckdb")
    t = time.perf_counter()
    for h in range(args.hours - 1):
        store.ingest_shards(work / "shards", con, hour=start + dt.timedelta(hours=h))
    history_s = time.perf_counter() - t
    con.close()

    hour = start + dt.timedelta(hours=args.hours - 1)
    part = steps.hourly_partitions()[0]
    runs = []
    for attempt in ("first", "rerun"):
        timings = {}
        t = time.perf_counter(); steps.check_arrival(part, hour); timings["wait_for_shards"] = time.perf_counter() - t
        t = time.perf_counter(); steps.ingest_hour(part, hour); timings["ingest"] = time.perf_counter() - t
        t = time.perf_counter(); steps.update_baselines(hour); timings["update_baselines"] = time.perf_counter() - t
        t = time.perf_counter(); steps.detect(hour); timings["detect"] = time.perf_counter() - t
        t = time.perf_counter(); steps.root_cause(hour); timings["root_cause"] = time.perf_counter() - t
        t = time.perf_counter(); steps.send_alerts(hour); timings["send_alerts"] = time.perf_counter() - t
        with Store(work / "cudawatch.duckdb").reader() as con:
            regs = load_regressions(con, statuses=OPEN, as_of=hour)
        runs.append({"run": attempt, "regressions": len(regs), "steps_s": {k: round(v, 2) for k, v in timings.items()},
                     "total_s": round(sum(timings.values()), 2)})
    print(json.dumps({
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpus": args.gpus, "hours": args.hours, "simulate_s": round(sim_s, 1), "history_ingest_s": round(history_s, 1),
        "runs": runs,
    }, indent=2))


if __name__ == "__main__":
    main()
