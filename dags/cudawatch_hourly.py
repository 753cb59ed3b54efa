"""
### cudawatch hourly analysis

For each UTC hour (the run's `data_interval_start`): wait for the hour's shards, ingest them,
update baselines, detect regressions, attach root causes and send alerts for new regressions.

* **wait_for_shards** (sensor, reschedule mode, one per partition): done when every host seen in
  the previous hours has sent its shards (and at least one shard arrived), or once the grace
  period after the hour has passed (`cudawatch_wait_grace_min`, default 20 min); then the
  pipeline goes on with what arrived.
* **ingest** (one per partition): loads the hour's shards and records missing (host, table) pairs
  in the warehouse table `data_gaps`.
* **analyse** (update_baselines → detect → root_cause → send_alerts), as of the hour, once per
  warehouse file: the one warehouse, or with `cudawatch_warehouse_layout=partitioned` each
  partition's own file (one mapped group per partition, so Celery workers run them in parallel;
  size the `cudawatch_duckdb` pool to the number of partitions). Alerts go through an outbox keyed
  by event id, so re-running an hour sends nothing twice.

Every task is one stage of `app.hour.run_hour(store, hour, partition)`, the composition
`cudawatch analyze` walks hour by hour; XCom carries only the hour and the partition.

Warehouse writers take the `cudawatch_duckdb` pool (size 1 for one warehouse) and a file lock; runs are ordered
(`max_active_runs=1`) because detection is incremental. Configuration: docs/airflow.md.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import CronTriggerTimetable, PokeReturnValue, dag, task, task_group

POOL = "cudawatch_duckdb"
START = dt.datetime.fromisoformat(os.environ.get("CUDAWATCH_START_DATE", "2026-11-01T00:00:00+00:00"))

default_args = {
    "owner": "cudawatch",
    "retries": 3,
    "retry_delay": dt.timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=20),
    "execution_timeout": dt.timedelta(minutes=45),
}


@dag(
    dag_id="cudawatch_hourly",
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC", interval=dt.timedelta(hours=1)),
    start_date=START if START.tzinfo else START.replace(tzinfo=dt.timezone.utc),
    catchup=True,
    max_active_runs=1,
    default_args=default_args,
    doc_md=__doc__,
    tags=["cudawatch", "hourly", "analytics"],
)
def cudawatch_hourly():
    @task
    def partitions() -> list[dict]:
        from app import steps

        return steps.hourly_partitions()

    @task.sensor(poke_interval=120, timeout=3 * 3600, mode="reschedule")
    def wait_for_shards(partition: dict, data_interval_start=None) -> PokeReturnValue:
        from app import steps

        done, _arrival = steps.check_arrival(partition, data_interval_start)
        return PokeReturnValue(is_done=done, xcom_value=partition)

    @task(pool=POOL)
    def ingest(partition: dict, data_interval_start=None) -> dict:
        from app import steps

        return steps.ingest_hour(partition, data_interval_start)

    @task
    def warehouses(ingested: list[dict]) -> list[dict]:
        from app import steps

        return steps.analysis_targets(list(ingested))

    @task(pool=POOL)
    def update_baselines(target: dict, data_interval_start=None) -> dict:
        from app import steps

        return steps.update_baselines(data_interval_start, target)

    @task(pool=POOL)
    def detect(target: dict, data_interval_start=None) -> dict:
        from app import steps

        return steps.detect(data_interval_start, target)

    @task(pool=POOL)
    def root_cause(target: dict, data_interval_start=None) -> dict:
        from app import steps

        return steps.root_cause(data_interval_start, target)

    @task(pool=POOL)
    def send_alerts(target: dict, data_interval_start=None) -> dict:
        from app import steps

        return steps.send_alerts(data_interval_start, target)

    @task_group(prefix_group_id=False)
    def analyse(target: dict):
        send_alerts(root_cause(detect(update_baselines(target))))

    # Each task is one stage of app.hour.run_hour for the run's hour; XCom carries only the hour,
    # the partition and the warehouse (the events stay in the warehouse). The analysis chain runs
    # once per warehouse file: once, or per partition in the partitioned layout.
    arrived = wait_for_shards.expand(partition=partitions())
    ingested = ingest.expand(partition=arrived)
    analyse.expand(target=warehouses(ingested))


cudawatch_hourly()
