"""
### cudawatch daily report

Once a day (00:45 UTC, after the last hourly run of the day): render the HTML report for the
previous UTC day (the run's `data_interval_start`), archive it under
`CUDAWATCH_REPORTS/YYYY-MM-DD/report.html`, and e-mail it through Airflow's SMTP connection
(`smtp_default`, or the id in `cudawatch_smtp_conn_id`) to `cudawatch_email_to`.
Re-running a day rewrites the same archive file. Configuration: docs/airflow.md.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import CronTriggerTimetable, dag, task

POOL = "cudawatch_duckdb"
START = dt.datetime.fromisoformat(os.environ.get("CUDAWATCH_START_DATE", "2026-11-01T00:00:00+00:00"))

default_args = {
    "owner": "cudawatch",
    "retries": 3,
    "retry_delay": dt.timedelta(minutes=2),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=30),
    "execution_timeout": dt.timedelta(minutes=30),
}


@dag(
    dag_id="cudawatch_daily_report",
    schedule=CronTriggerTimetable("45 0 * * *", timezone="UTC", interval=dt.timedelta(days=1)),
    start_date=START if START.tzinfo else START.replace(tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=default_args,
    doc_md=__doc__,
    tags=["cudawatch", "daily", "report"],
)
def cudawatch_daily_report():
    @task(pool=POOL)
    def build_report(data_interval_start=None) -> str:
        from app import steps

        return steps.build_daily_report(data_interval_start)

    @task
    def email_report(report_dir: str, data_interval_start=None) -> dict:
        from app import steps

        return steps.email_daily_report(data_interval_start, report_dir)

    email_report(build_report())


cudawatch_daily_report()
