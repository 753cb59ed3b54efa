"""Fleet scale: a whole simulated day through cudawatch, stage by stage, against a plain DuckDB load.

    python benchmarks/fleet.py --gpus 64,256,1024 [--hours 24] [--profile-hour 12] [--nice]

For each size N (jobs = N / 16, so 64 jobs at 1,024 GPUs; ``simulate_fleet(..., jobs=...)``) it
simulates N GPUs x H hours once, then runs each stage in its own child process (so each stage's
peak RSS is its own, ``ru_maxrss``) on the same shards:

- ``plain``: ``CREATE TABLE t AS SELECT * FROM read_parquet('<t>/**/*.parquet')`` for the four
  tables into a fresh DuckDB file -- the floor for ingest (no validation, ledger or dedupe);
- ``ingest``: ``analytics.store.ingest_shards`` of the whole day into a fresh warehouse;
- ``catch_up``: ``app.hour.catch_up`` on that warehouse (the CLI's ``analyze`` over the day);
- ``hourly``: a fresh warehouse driven as the hourly DAG drives it, ``run_hour(store, h, partition)``
  for every hour in order (ingest of the hour + late re-scan + baselines + detect + root cause);
  seconds per hour;
- ``report``: the daily report of the last day (``reports.render.build_archived_report``).

``--profile-hour H`` also runs hour H of the hourly path under cProfile (after hours 0..H-1) and
prints the top functions by cumulative time. DuckDB resources come from ``CUDAWATCH_DUCKDB_*``.
Prints one JSON object per size and a markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `python benchmarks/fleet.py` puts benchmarks/ first on sys.path, where benchmarks/reports.py would
# shadow the reports package: put the repository first instead.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)

# Each stage is a function run in a child (``fleet.py --stage NAME --work DIR ...``).


def _rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_simulate(work: Path, gpus: int, hours: int, jobs: int, seed: int, **_) -> dict:
    from simulator import simulate_fleet

    t = time.perf_counter()
    truth = simulate_fleet(work / "shards", gpus=gpus, hours=hours, seed=seed, start=START, jobs=jobs)
    files = [p for p in (work / "shards").rglob("*.parquet")]
    return {"seconds": time.perf_counter() - t, "rows": truth.rows, "shards": truth.shards,
            "mb": sum(p.stat().st_size for p in files) / 1e6, "regressions": len(truth.regressions)}


def stage_plain(work: Path, **_) -> dict:
    import duckdb

    db = work / "plain.duckdb"
    db.unlink(missing_ok=True)
    con = duckdb.connect(str(db))
    t = time.perf_counter()
    for table in ("kernels", "memcpy", "device", "health"):
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{work}/shards/{table}/**/*.parquet', "
                    "hive_partitioning = false)")
    con.execute("CHECKPOINT")
    seconds = time.perf_counter() - t
    rows = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("kernels", "memcpy", "device", "health"))
    con.close()
    return {"seconds": seconds, "rows": rows}


def stage_ingest(work: Path, **_) -> dict:
    from analytics.store import Store, ingest_shards

    t = time.perf_counter()
    with Store(work / "day.duckdb").writer() as con:
        result = ingest_shards(work / "shards", con)
        con.execute("CHECKPOINT")
    return {"seconds": time.perf_counter() - t, "rows": sum(result.rows.values()), "quarantined": len(result.quarantined)}


def stage_catch_up(work: Path, **_) -> dict:
    from analytics.store import Store
    from app.hour import catch_up

    t = time.perf_counter()
    done = catch_up(Store(work / "day.duckdb"))
    return {"seconds": time.perf_counter() - t, "hours": len(done.hours), "regressions": len(done.regressions)}


def stage_hourly(work: Path, hours: int, profile_hour: int | None = None, **_) -> dict:
    from analytics.store import Store
    from app.hour import run_hour

    store = Store(work / "hourly.duckdb")
    part = {"name": "default", "shards": str(work / "shards")}
    per_hour, rss = [], []
    last = hours if profile_hour is None else profile_hour
    for h in range(last):
        t = time.perf_counter()
        result = run_hour(store, START + dt.timedelta(hours=h), part)
        per_hour.append(round(time.perf_counter() - t, 2))
        rss.append(round(_rss_mib()))
    out = {"seconds": sum(per_hour), "per_hour_s": per_hour, "rss_mib_after_hour": rss,
           "open_regressions": len(result.regressions) if last else 0}
    if profile_hour is not None:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.runcall(run_hour, store, START + dt.timedelta(hours=profile_hour), part)
        out["profiled_hour_s"] = time.perf_counter() - t
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        out["profile"] = buf.getvalue()
    return out


def stage_report(work: Path, hours: int, **_) -> dict:
    from analytics.store import Store
    from reports import render

    day = (START + dt.timedelta(hours=hours - 1)).date()
    t = time.perf_counter()
    with Store(work / "hourly.duckdb").reader() as con:
        rendered = render.build_archived_report(con, day, work / "report" / "report.html")
    render.write_rendered(rendered, work / "report" / "report.html")
    return {"seconds": time.perf_counter() - t, "charts": len(rendered.images), "html_kb": len(rendered.html) / 1e3}


STAGES = {"simulate": stage_simulate, "plain": stage_plain, "ingest": stage_ingest, "catch_up": stage_catch_up,
          "hourly": stage_hourly, "report": stage_report}


def _child(stage: str, work: Path, args, nice: bool, **extra) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--work", str(work),
           "--gpus", str(args_gpus(args)), "--hours", str(args.hours), "--seed", str(args.seed)]
    for k, v in extra.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    if nice:
        cmd = ["nice", "-n", "10"] + cmd
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode:
        raise RuntimeError(f"stage {stage} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def args_gpus(args) -> int:
    return int(str(args.gpus).split(",")[0])


def run_size(gpus: int, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"cw-fleet-{gpus}-", dir=args.tmp))
    args.gpus = str(gpus)
    jobs = max(3, gpus // 16)
    out = {"gpus": gpus, "hours": args.hours, "jobs": jobs, "load_before": os.getloadavg()[0]}
    try:
        out["simulate"] = _child("simulate", work, args, args.nice, jobs=jobs)
        for stage in ("plain", "ingest", "catch_up", "hourly", "report"):
            out[stage] = _child(stage, work, args, args.nice)
        if args.profile_hour is not None:
            shutil.rmtree(work / "hourly.duckdb", ignore_errors=True)
            (work / "hourly.duckdb").unlink(missing_ok=True)
            out["profile"] = _child("hourly", work, args, args.nice, profile_hour=args.profile_hour)
        out["load_after"] = os.getloadavg()[0]
        out["warehouse_mb"] = (work / "hourly.duckdb").stat().st_size / 1e6
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _table(results: list[dict]) -> str:
    lines = ["| GPUs (jobs) | raw rows | plain load s | ingest s (x plain) | catch-up s | hourly s: median / max | "
             "day s (24 hourly + report) | report s | peak RSS MiB (ingest / hourly / report) | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ph = sorted(r["hourly"]["per_hour_s"])
        med = ph[len(ph) // 2]
        day = r["hourly"]["seconds"] + r["report"]["seconds"]
        rows = sum(r["simulate"]["rows"].values())
        lines.append(
            f"| {r['gpus']:,} ({r['jobs']}) | {rows:,} | {r['plain']['seconds']:.1f} | {r['ingest']['seconds']:.1f} "
            f"({r['ingest']['seconds'] / r['plain']['seconds']:.2f}) | {r['catch_up']['seconds']:.1f} | {med:.1f} / {ph[-1]:.1f} | "
            f"{day:.0f} | {r['report']['seconds']:.1f} | {r['ingest']['rss_mib']:.0f} / {r['hourly']['rss_mib']:.0f} / "
            f"{r['report']['rss_mib']:.0f} | {r['load_before']:.1f}-{r['load_after']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="64,256,1024", help="comma-separated fleet sizes")
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile-hour", type=int, default=None, help="profile this hour of the hourly path")
    ap.add_argument("--nice", action="store_true", help="run the stages under nice -n 10 (shared machine)")
    ap.add_argument("--tmp", default=None, help="folder for the work directories")
    ap.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:
        kw = {"gpus": args_gpus(args), "hours": args.hours, "jobs": args.jobs, "seed": args.seed,
              "profile_hour": args.profile_hour}
        result = STAGES[args.stage](args.work, **kw)
        result["rss_mib"] = _rss_mib()
        print(json.dumps(result))
        return
    print(f"# {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}", flush=True)
    results = []
    for gpus in [int(x) for x in args.gpus.split(",")]:
        r = run_size(gpus, args)
        profile = r.get("profile", {}).pop("profile", None)
        print(json.dumps(r), flush=True)
        if profile:
            print(profile, flush=True)
        results.append(r)
    print(_table(results))


if __name__ == "__main__":
    main()
