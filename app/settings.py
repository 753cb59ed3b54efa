"""Settings: Airflow Variables and Connections inside a task, the environment everywhere else.

``setting("db")`` is the Variable ``cudawatch_db`` inside a running Airflow task, else
``CUDAWATCH_DB``, else the default. Outside Airflow (CLI, demo, benchmarks) Airflow is neither
imported nor asked. Secrets (webhook URLs) come from Connections or the environment, never from
code or logs. docs/airflow.md lists every setting.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytics.store import PartitionView, Store, partition_db
from analytics.store.partitions import check_name
from cudawatch.config import AlertConfig, ConfigError, DuckDBConfig, Paths
from cudawatch.inputs import partition_key

log = logging.getLogger(__name__)


def _in_airflow_task() -> bool:
    """True inside an Airflow task: the task runner exports ``AIRFLOW_CTX_DAG_ID`` before running
    it. Outside (CLI, benchmarks) Airflow is neither imported (5 s) nor asked."""
    return bool(os.environ.get("AIRFLOW_CTX_DAG_ID"))


def _ask_airflow(kind: str, key: str, lookup) -> Any:
    """``lookup()`` inside a running Airflow task; None outside Airflow or when the lookup fails
    (no supervisor, no metadata DB, missing Variable or Connection): callers fall back to the
    environment. Inside a task Airflow is installed, so a failing import is not caught here."""
    if not _in_airflow_task():
        return None
    try:
        return lookup()
    except Exception as exc:  # noqa: BLE001 - any failure means "not configured in Airflow"
        log.debug("Airflow %s %s unavailable (%s); using the environment", kind, key, type(exc).__name__)
        return None


def _airflow_variable(key: str) -> str | None:
    """An Airflow Variable's value inside a running task; None outside Airflow or when unset."""

    def lookup():
        from airflow.sdk import Variable

        return Variable.get(key, default=None)

    value = _ask_airflow("Variable", key, lookup)
    return value if value not in (None, "") else None


def _airflow_connection_secret(conn_id: str) -> str | None:
    """A URL kept in an Airflow Connection: its password if set, else its host (a full URL)."""

    def lookup():
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        return conn.password or conn.host or None

    return _ask_airflow("Connection", conn_id, lookup)


def setting(name: str, default: str | None = None) -> str | None:
    """One setting: Airflow Variable ``cudawatch_<name>``, else env ``CUDAWATCH_<NAME>``, else default."""
    value = _airflow_variable(f"cudawatch_{name.lower()}")
    if value is None:
        value = os.environ.get(f"CUDAWATCH_{name.upper()}") or None
    return value if value is not None else default


def int_setting(name: str, default: int) -> int:
    raw = setting(name, str(default))
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"cudawatch_{name.lower()} / CUDAWATCH_{name.upper()}={raw!r} is not an integer") from exc


@dataclass(frozen=True)
class Settings:
    """Everything a pipeline step needs, resolved inside the task (never at DAG parse time).

    Paths come from Variables ``cudawatch_shards|db|reports`` or ``CUDAWATCH_SHARDS|DB|REPORTS``;
    wait_grace_min: how long after an hour ends the sensor waits for late hosts;
    expect_lookback_h: hours before the current one whose hosts are expected to report;
    lock_timeout_s: how long a step waits for another warehouse writer;
    layout: ``single`` (default: one warehouse file ``db``) or ``partitioned`` (``db`` is a
    directory, one file per partition, ``analytics.store.partitions``), Variable
    ``cudawatch_warehouse_layout`` / ``CUDAWATCH_WAREHOUSE_LAYOUT``.
    """

    shards: Path
    db: Path
    reports: Path
    wait_grace_min: int = 20
    expect_lookback_h: int = 3
    lock_timeout_s: int = 900
    duckdb: DuckDBConfig = DuckDBConfig()
    layout: str = "single"

    @classmethod
    def resolve(cls) -> "Settings":
        env = Paths.from_env()
        return cls(
            shards=Path(setting("shards", str(env.shards))),
            db=Path(setting("db", str(env.db))),
            reports=Path(setting("reports", str(env.reports))),
            wait_grace_min=int_setting("wait_grace_min", 20),
            expect_lookback_h=int_setting("expect_lookback_h", 3),
            lock_timeout_s=int_setting("lock_timeout_s", 900),
            duckdb=duckdb_config(),
            layout=warehouse_layout(),
        )

    @property
    def partitioned(self) -> bool:
        return self.layout == "partitioned"

    def store(self, partition: str | None = None) -> Store | PartitionView:
        """The warehouse, opened under the shared writer lock with this lock timeout.

        Single layout: the one file, whatever ``partition``. Partitioned: partition's own file
        (``<db>/<partition>.duckdb``), or without one the read-only view over all of them."""
        kw = {"lock_timeout_s": self.lock_timeout_s, "resources": self.duckdb}
        if not self.partitioned:
            return Store(self.db, **kw)
        if partition is None:
            return PartitionView(self.db, **kw)
        return Store(partition_db(self.db, partition), **kw)

    def analysis_targets(self, partitions: list[str]) -> list[dict[str, str | None]]:
        """What the hourly analysis stages map over: the one warehouse (``{"warehouse": None}``),
        or in the partitioned layout each partition's file."""
        if not self.partitioned:
            return [{"warehouse": None}]
        return [{"warehouse": name} for name in sorted(set(partitions))]


LAYOUTS = ("single", "partitioned")


def warehouse_layout() -> str:
    """``single`` or ``partitioned`` (Variable ``cudawatch_warehouse_layout``, else
    ``CUDAWATCH_WAREHOUSE_LAYOUT``, default ``single``)."""
    value = (setting("warehouse_layout", "single") or "single").strip().lower()
    if value not in LAYOUTS:
        raise ConfigError(f"cudawatch_warehouse_layout / CUDAWATCH_WAREHOUSE_LAYOUT={value!r}: use one of {LAYOUTS}")
    return value


def duckdb_config() -> DuckDBConfig:
    """DuckDB threads / memory limit / temp directory: Variables ``cudawatch_duckdb_threads``,
    ``cudawatch_duckdb_memory_limit``, ``cudawatch_duckdb_temp_dir``, else ``CUDAWATCH_DUCKDB_*``."""
    env = DuckDBConfig.from_env()
    threads = setting("duckdb_threads")
    temp = setting("duckdb_temp_dir")
    try:
        n = env.threads if threads is None else int(threads)
    except ValueError as exc:
        raise ConfigError(f"cudawatch_duckdb_threads={threads!r} is not an integer") from exc
    return DuckDBConfig(threads=n, memory_limit=setting("duckdb_memory_limit", env.memory_limit),
                        temp_directory=env.temp_directory if temp is None else Path(temp))


def alert_config() -> AlertConfig:
    """AlertConfig from Connections ``cudawatch_slack`` / ``cudawatch_webhook``, else the environment."""
    env = AlertConfig.from_env()
    return dataclasses.replace(
        env,
        slack_webhook_url=_airflow_connection_secret("cudawatch_slack") or env.slack_webhook_url,
        webhook_url=_airflow_connection_secret("cudawatch_webhook") or env.webhook_url,
        report_url=setting("report_url", env.report_url),
    )



def hourly_partitions() -> list[dict[str, str]]:
    """The partitions the hourly DAG maps over: one per shard root.

    ``cudawatch_partitions`` / ``CUDAWATCH_PARTITIONS`` lists ``name=shard_root`` pairs separated
    by commas (one per cluster, say); unset means one partition, ``default``, over
    ``CUDAWATCH_SHARDS``. Each partition's sensor and ingest run as their own mapped task
    instances, so a Celery or Kubernetes executor spreads them over workers.
    """
    raw = setting("partitions")
    if not raw:
        return [{"name": "default", "shards": str(Settings.resolve().shards)}]
    parts = []
    for item in raw.split(","):
        name, sep, root = item.strip().partition("=")
        if not sep or not name or not root:
            raise ConfigError(f"cudawatch_partitions entry {item!r} is not name=shard_root")
        name = name.strip()
        try:
            check_name(name)  # it names the partition's warehouse file in the partitioned layout
        except ValueError as exc:
            raise ConfigError(f"cudawatch_partitions: {exc}") from None
        parts.append({"name": name, "shards": root.strip()})
    if len({partition_key(p["name"]) for p in parts}) != len(parts):
        # partition_key: names that differ only in case or '-'/'_' would share a partition's DuckDB catalog
        raise ConfigError(f"cudawatch_partitions has duplicate names (case and '-'/'_' do not count): {raw!r}")
    return parts
