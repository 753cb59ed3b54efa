#!/usr/bin/env bash
# CI: run the hourly DAG for real with `airflow dags test`, in a throw-away AIRFLOW_HOME with a
# SQLite metadata database, over simulated shards. Run from the repository root with the venv
# active (.ci/run does both). Exits non-zero if the run or any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
echo "::group::airflow dags test cudawatch_hourly"

work=$(mktemp -d -t cudawatch-airflow-ci-XXXXXX)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
export AIRFLOW_HOME="$work/airflow"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING
export CUDAWATCH_SHARDS="$work/shards" CUDAWATCH_DB="$work/cudawatch.duckdb" CUDAWATCH_REPORTS="$work/reports"
mkdir -p "$AIRFLOW_HOME"

airflow db migrate >"$work/migrate.log" 2>&1 || { cat "$work/migrate.log"; exit 1; }
airflow pools set cudawatch_duckdb 1 "cudawatch DuckDB writers" >/dev/null

# Six simulated hours of 16 GPUs (two hosts); in the last hour one host's kernel shard is missing,
# so the run must complete anyway and record the gap.
cudawatch simulate --out "$CUDAWATCH_SHARDS" --gpus 16 --hours 6 --seed 3 --start 2026-11-01T00:00:00+00:00 --inject none
victim=$(ls "$CUDAWATCH_SHARDS/kernels/date=2026-11-01/hour=05/" | head -1)
rm "$CUDAWATCH_SHARDS/kernels/date=2026-11-01/hour=05/$victim"

# The logical date ends the data interval: 06:00 analyses hour 05. `dags test` exits non-zero when
# the run fails; the check below also reads the run's and the tasks' states from the metadata DB.
airflow dags test cudawatch_hourly 2026-11-01T06:00:00+00:00 >"$work/dags-test.log" 2>&1 || { tail -n 80 "$work/dags-test.log"; exit 1; }
python - "$CUDAWATCH_DB" "$AIRFLOW_HOME/airflow.db" <<'PY'
import sqlite3, sys, duckdb
meta = sqlite3.connect(sys.argv[2])
runs = meta.execute("SELECT run_id, state FROM dag_run WHERE dag_id = 'cudawatch_hourly'").fetchall()
tis = dict(meta.execute("SELECT task_id || '[' || map_index || ']', state FROM task_instance WHERE dag_id = 'cudawatch_hourly'").fetchall())
print(f"hourly runs: {runs}; tasks: {tis}")
assert [s for _, s in runs] == ["success"] and set(tis.values()) == {"success"} and len(tis) == 8, (runs, tis)  # one partition, single layout: partitions, wait_for_shards, ingest, warehouses, then the 4 analysis tasks once
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SET TimeZone = 'UTC'")
rows = con.execute("SELECT count(*) FROM kernels WHERE window_start >= TIMESTAMPTZ '2026-11-01 05:00:00+00' AND window_start < TIMESTAMPTZ '2026-11-01 06:00:00+00'").fetchone()[0]
gaps = con.execute("SELECT host, table_name FROM data_gaps WHERE hour = TIMESTAMPTZ '2026-11-01 05:00:00+00'").fetchall()
print(f"hour 05: {rows} kernel rows ingested; gaps recorded: {gaps}")
assert rows > 0, "the DAG ingested no kernel rows for hour 05"
assert len(gaps) == 1 and gaps[0][1] == "kernels", gaps
PY
echo "::endgroup::"
echo "airflow CI step finished in $(( $(date +%s) - start )) s"
