"""
### cudawatch maintenance

Daily at 03:30 UTC: merge the small shards of settled hours (older than
`cudawatch_compact_after_h`, default 48 h), drop shards, warehouse rows and report archives past
their retention (`cudawatch_retain_shard_days` 30, `cudawatch_retain_warehouse_days` 180,
`cudawatch_retain_report_days` 365), then CHECKPOINT and ANALYZE the DuckDB warehouse. The
compaction, retention and checkpoint run once per partition (`cudawatch_partitions`, mapped):
on its shard root and, with `cudawatch_warehouse_layout=partitioned`, on its own warehouse file.
Ages are measured from the run's `data_interval_end`, not the clock. Configuration: docs/airflow.md.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import CronTriggerTimetable, dag, task, task_group

POOL = "cudawatch_duckdb"
START = dt.datetime.fromisoformat(os.environ.get("CUDAWATCH_START_DATE", "2026-11-01T00:00:00+00:00"))

default_args = {
    "owner": "cudawatch",
    "retries": 2,
    "retry_delay": dt.timedelta(minutes=5),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=60),
    "execution_timeout": dt.timedelta(hours=2),
}


@dag(
    dag_id="cudawatch_maintenance",
    schedule=CronTriggerTimetable("30 3 * * *", timezone="UTC", interval=dt.timedelta(days=1)),
    start_date=START if START.tzinfo else START.replace(tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=default_args,
    doc_md=__doc__,
    tags=["cudawatch", "maintenance"],
)
def cudawatch_maintenance():
    @task
    def partitions() -> list[dict]:
        from app import steps

        return steps.hourly_partitions()

    @task(pool=POOL)
    def compact_shards(partition: dict, data_interval_end=None) -> dict:
        from app import steps

        return steps.compact_shards(data_interval_end, partition)

    @task(pool=POOL)
    def apply_retention(partition: dict, data_interval_end=None) -> dict:
        from app import steps

        return steps.apply_retention(data_interval_end, partition)

    @task(pool=POOL)
    def checkpoint(partition: dict) -> dict:
        from app import steps

        return steps.checkpoint_warehouse(partition)

    @task
    def expire_reports(data_interval_end=None) -> dict:
        from app import steps

        return steps.expire_reports(data_interval_end)

    @task_group(prefix_group_id=False)
    def maintain(partition: dict):
        compact_shards(partition) >> apply_retention(partition) >> checkpoint(partition)

    # One chain per partition (its shard root and, in the partitioned layout, its own warehouse
    # file), mapped like the hourly DAG's ingest; the report archive is expired once.
    maintain.expand(partition=partitions()) >> expire_reports()


cudawatch_maintenance()
