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
* **update_baselines → detect → root_cause → send_alerts**: over the whole warehouse, as of the
  hour. Alerts go through an outbox keyed by event id, so re-running an hour sends nothing twice.

Every task is one stage of `app.hour.run_hour(store, hour, partition)`, the composition
`cudawatch analyze` walks hour by hour; XCom carries only the hour and the partition.

Warehouse writers take the `cudawatch_duckdb` pool (size 1) and a file lock; runs are ordered
(`max_active_runs=1`) because detection is incremental. Configuration: docs/airflow.md.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import CronTriggerTimetable, PokeReturnValue, dag, task

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

    @task(pool=POOL)
    def update_baselines(data_interval_start=None) -> dict:
        from app import steps

        return steps.update_baselines(data_interval_start)

    @task(pool=POOL)
    def detect(data_interval_start=None) -> dict:
        from app import steps

        return steps.detect(data_interval_start)

    @task(pool=POOL)
    def root_cause(data_interval_start=None) -> dict:
        from app import steps

        return steps.root_cause(data_interval_start)

    @task(pool=POOL)
    def send_alerts(data_interval_start=None) -> dict:
        from app import steps

        return steps.send_alerts(data_interval_start)

    # Each task is one stage of app.hour.run_hour for the run's hour; XCom carries only the hour
    # and the partition (the events stay in the warehouse).
    arrived = wait_for_shards.expand(partition=partitions())
    ingested = ingest.expand(partition=arrived)
    ingested >> update_baselines() >> detect() >> root_cause() >> send_alerts()


cudawatch_hourly()
