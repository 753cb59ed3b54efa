"""The Airflow step functions: each DAG task is one import and one call into this module.

Steps take the hour (or day) from the caller -- Airflow's ``data_interval_start``, never the
clock -- resolve their settings inside the task (app.settings), and open the warehouse through
``analytics.store.Store`` (writer lock shared with the CLI). The hourly steps are stages of
``app.hour.run_hour``, the same composition ``cudawatch analyze`` and the demo use; their XCom
values carry only the hour and the partition.

Hourly: ``hourly_partitions`` -> ``check_arrival`` (the sensor) -> ``ingest`` (one call per
partition) -> ``analysis_targets`` -> ``update_baselines`` -> ``detect`` -> ``root_cause`` ->
``send_alerts`` (one chain per warehouse file: one, or one per partition in the partitioned
layout, ``app.settings.Settings.analysis_targets``).
Daily: app.daily. Maintenance: ``compact_shards``, ``apply_retention``, ``checkpoint_warehouse``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from app.arrival import check_arrival
from app.daily import build_daily_report, email_daily_report, report_day
from app.settings import Settings, alert_config, hourly_partitions, int_setting, setting
from cudawatch.shards import hour_floor

log = logging.getLogger(__name__)

#: Airflow pool that serialises the warehouse writers (size 1; create it once per deployment).
DUCKDB_POOL = "cudawatch_duckdb"

hour_of = hour_floor  # the UTC hour (stdlib datetime) of a pendulum, ISO string or datetime

__all__ = [
    "DUCKDB_POOL", "hour_of", "hourly_partitions", "check_arrival", "ingest_hour", "analysis_targets", "update_baselines", "detect",
    "root_cause", "send_alerts", "report_day", "build_daily_report", "email_daily_report", "compact_shards",
    "apply_retention", "expire_reports", "checkpoint_warehouse", "Settings", "setting",
]


def _stage(stage: str, hour, partition: dict[str, str] | None = None, *, warehouse: str | None = None, **kw):
    """Run one stage of ``run_hour`` on the warehouse the layout gives: the one file, or in the
    partitioned layout the file of ``warehouse`` (analysis) or of ``partition`` (ingest)."""
    from app.hour import run_hour

    cfg = Settings.resolve()
    store = cfg.store(partition["name"] if partition else warehouse)
    return run_hour(store, hour, partition, stages=(stage,), expect_lookback_h=cfg.expect_lookback_h, **kw)


def ingest_hour(partition: dict[str, str], hour: dt.datetime | str) -> dict[str, str]:
    """Load one partition's shards of ``hour`` (and late ones of the 24 h before); record what is
    still missing in ``data_gaps``. Idempotent: the ledger skips loaded shards and the hour's gap
    rows are replaced, so a late shard picked up by a re-run clears its gap. In the partitioned
    layout the partition's own warehouse file takes them."""
    _stage("ingest", hour, partition)
    return {"hour": hour_floor(hour).isoformat(), "partition": partition["name"]}


def analysis_targets(ingested: list[dict[str, str]]) -> list[dict[str, str | None]]:
    """What the analysis stages map over (``Settings.analysis_targets``): ``[{"warehouse": None}]``
    for the single warehouse, else one ``{"warehouse": name}`` per ingested partition."""
    return Settings.resolve().analysis_targets([i["partition"] for i in ingested])


def _analyse(stage: str, hour, target: dict | None, **kw):
    """One analysis stage on ``target``'s warehouse; the stage's result and the task's XCom value."""
    warehouse = (target or {}).get("warehouse")
    result = _stage(stage, hour, warehouse=warehouse, **kw)
    return result, {"hour": hour_floor(hour).isoformat(), "warehouse": warehouse}


def update_baselines(hour: dt.datetime | str, target: dict | None = None) -> dict:
    """Baselines of every watched series as of ``hour`` (analytics.baselines)."""
    return _analyse("baselines", hour, target)[1]


def detect(hour: dt.datetime | str, target: dict | None = None) -> dict:
    """Regression events as of ``hour`` (analytics.detect), stored in the warehouse."""
    return _analyse("detect", hour, target)[1]


def root_cause(hour: dt.datetime | str, target: dict | None = None) -> dict:
    """Root causes of the events open at ``hour`` (analytics.rules); the hour is then analysed."""
    return _analyse("root_cause", hour, target)[1]


def send_alerts(hour: dt.datetime | str, target: dict | None = None) -> dict:
    """Send the events open at ``hour`` that no channel carried yet (reports.alerts, an outbox
    keyed by event id), so re-running an hour sends nothing twice."""
    result, out = _analyse("alert", hour, target, alert_config=alert_config())
    if result.alerts.failed:
        # Airflow retries the task; the outbox re-sends only what is due and never a sent alert.
        raise RuntimeError(f"{result.alerts.failed} alerts failed; the outbox table has the reasons")
    return out


# --------------------------------------------------------------------------- maintenance steps


def _maintained(partition: dict[str, str] | None):
    """(settings, shard root, warehouse) one maintenance task works on: a partition's shard root
    and its warehouse (its own file in the partitioned layout, the one file otherwise), or
    without a partition ``CUDAWATCH_SHARDS`` and the warehouse."""
    cfg = Settings.resolve()
    if partition is None:
        return cfg, cfg.shards, cfg.store()
    return cfg, partition["shards"], cfg.store(partition["name"])


def compact_shards(interval_end: dt.datetime | str, partition: dict[str, str] | None = None) -> dict[str, Any]:
    """Merge small shards of fully loaded, settled partitions (analytics.store.maintenance)."""
    from analytics.store import maintenance

    _cfg, shards, store = _maintained(partition)
    older_than = hour_floor(interval_end) - dt.timedelta(hours=int_setting("compact_after_h", 48))
    with store.writer() as con:
        out = maintenance.compact_shards(shards, con, older_than=older_than,
                                         small_bytes=int_setting("compact_small_bytes", 8 << 20))
    return out.as_dict()


def _policy(**override):
    from analytics.store import maintenance

    policy = maintenance.RetentionPolicy(
        shard_days=int_setting("retain_shard_days", 30),
        warehouse_days=int_setting("retain_warehouse_days", 180),
        report_days=int_setting("retain_report_days", 365),
    )
    return dataclasses.replace(policy, **override)


def apply_retention(interval_end: dt.datetime | str, partition: dict[str, str] | None = None) -> dict[str, Any]:
    """Drop shards and warehouse rows past their retention (analytics.store.maintenance); without
    a partition also the report archives (with one, ``expire_reports`` does that once)."""
    from analytics.store import maintenance

    cfg, shards, store = _maintained(partition)
    policy = _policy() if partition is None else _policy(report_days=0)
    with store.writer() as con:
        out = maintenance.apply_retention(shards, con, cfg.reports, now=hour_floor(interval_end), policy=policy)
    return out.as_dict()


def expire_reports(interval_end: dt.datetime | str) -> dict[str, Any]:
    """Drop report archive days past their retention (no warehouse involved)."""
    from analytics.store import maintenance

    cfg = Settings.resolve()
    policy = _policy(shard_days=0, warehouse_days=0)
    return maintenance.apply_retention(cfg.shards, None, cfg.reports, now=hour_floor(interval_end), policy=policy).as_dict()


def checkpoint_warehouse(partition: dict[str, str] | None = None) -> dict[str, Any]:
    """CHECKPOINT and ANALYZE the warehouse file (analytics.store.maintenance.checkpoint)."""
    from analytics.store import maintenance

    cfg, _shards, store = _maintained(partition)
    with store.writer() as con:
        return maintenance.checkpoint(con, store.db)
