"""The one path an hour of data takes: ``run_hour(store, hour, partition=None)``.

Stages, in order: ``ingest`` (one partition's shards of the hour, late shards of the 24 hours
before, and the hour's data gaps), ``baselines``, ``detect``, ``root_cause`` (the hour is then
recorded in ``analysed_hours``) and ``alert``. The CLI, the demo and every task of the hourly DAG
call it -- a DAG task runs one stage, the CLI the analysis stages -- so they all compute the same
thing. ``catch_up`` walks every hour not yet analysed, oldest first, which is what the hourly DAG
would have done hour by hour.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from analytics import baselines, detect, explain
from analytics.results import Regression
from analytics.store import IngestResult, Store, hours, ingest_shards
from analytics.store.regressions import OPEN, events_to_explain, load_regressions, reported_since
from analytics.store.series import shared_matrices
from cudawatch import objectstore
from cudawatch.config import AlertConfig
from cudawatch.shards import hour_floor

log = logging.getLogger(__name__)

HOUR = dt.timedelta(hours=1)
STAGES = ("ingest", "baselines", "detect", "root_cause", "alert")
ANALYSIS = ("baselines", "detect", "root_cause")
#: How many earlier hours each hourly ingest re-scans for shards that arrived late.
LATE_SHARD_HOURS = 24
#: Hours the detector looks back (analytics.detect.DetectConfig.lookback_hours): the first catch-up
#: starts at most this far back.
LOOKBACK_HOURS = detect.DetectConfig().lookback_hours


@dataclass
class HourResult:
    """What ``run_hour`` did for one hour."""

    hour: dt.datetime
    partition: str | None = None
    stages: tuple[str, ...] = ()
    ingest: IngestResult | None = None
    late_loaded: int = 0
    gaps: int = 0
    regressions: list[Regression] = field(default_factory=list)
    alerts: object | None = None  # reports.alerts.AlertResult

    def summary(self) -> str:
        out = [f"hour {self.hour.isoformat()}" + (f" partition {self.partition}" if self.partition else "")]
        if self.ingest is not None:
            out.append(f"{self.ingest.summary()}; {self.late_loaded} late shards; {self.gaps} gaps")
        if "detect" in self.stages or "root_cause" in self.stages:
            out.append(f"{len(self.regressions)} open regressions")
        if self.alerts is not None:
            out.append(self.alerts.summary())
        return "; ".join(out)


def run_hour(store: Store, hour: dt.datetime | str, partition: dict[str, str] | None = None, *,
             stages: Iterable[str] | None = None, expect_lookback_h: int = 3,
             alert_config: AlertConfig | None = None) -> HourResult:
    """Run ``stages`` (default: all that apply) of the hourly pipeline for ``hour``.

    partition: ``{"name": ..., "shards": root}``, needed by ``ingest`` (the DAG maps it over the
    partitions). alert_config: the channels, needed by ``alert``. Every stage is idempotent.
    """
    hour = hour_floor(hour)
    if stages is None:
        stages = (("ingest",) if partition else ()) + ANALYSIS + (("alert",) if alert_config else ())
    stages = tuple(stages)
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; known: {STAGES}")
    if "ingest" in stages and not partition:
        raise ValueError("the ingest stage needs a partition")
    if "alert" in stages and alert_config is None:
        raise ValueError("the alert stage needs an alert_config")
    result = HourResult(hour, partition["name"] if partition else None, stages)
    with store.writer() as con:
        if "ingest" in stages:
            _ingest(con, partition, hour, expect_lookback_h, result)
        with shared_matrices():  # baselines and detection of one hour read the same series
            if "baselines" in stages:
                baselines.update_baselines(con, hour)
            if "detect" in stages:
                result.regressions = detect.detect_regressions(con, hour)
        if "root_cause" in stages:
            explained = {r.event_id: r for r in explain.attach_causes(con, events_to_explain(con, hour), as_of=hour)}
            result.regressions = [explained.get(r.event_id, r) for r in load_regressions(con, statuses=OPEN, as_of=hour)]
            hours.mark_analysed(con, hour)
        if "alert" in stages:
            from reports.alerts import send_new_alerts

            result.alerts = send_new_alerts(con, alert_config, regressions=load_regressions(con, statuses=OPEN, as_of=hour))
    log.info("%s", result.summary())
    return result


def _ingest(con, partition: dict[str, str], hour: dt.datetime, lookback_h: int, result: HourResult) -> None:
    from app.arrival import arrival

    root = _local_root(partition, hour)
    if root != Path(partition["shards"]):
        partition = {**partition, "shards": str(root)}
    result.ingest = ingest_shards(root, con, hour=hour)
    # Shards that arrived after their own hour's run: the ledger makes re-scanning cheap.
    late = [ingest_shards(root, con, hour=hour - h * HOUR) for h in range(1, LATE_SHARD_HOURS + 1)]
    info = arrival(partition, hour, lookback_h)
    hours.replace_gaps(con, hour, partition["name"],
                       [(host, table, dt.datetime.fromisoformat(seen)) for host, table, seen in info["missing"]])
    result.late_loaded = sum(r.loaded for r in late)
    result.gaps = len(info["missing"])
    for r in late:
        result.ingest.quarantined.extend(r.quarantined)
    for path, reason in result.ingest.quarantined:
        log.warning("quarantined %s: %s", path, reason)


def _local_root(partition: dict[str, str], hour: dt.datetime) -> Path:
    """The partition's shard root on disk: itself, or for an ``s3://`` root the local mirror
    (``partition["cache"]``, else ``$CUDAWATCH_SHARD_CACHE/<name>``, default ``shard-cache/<name>``)
    after copying in what is new for the hour and the late-shard window (cudawatch.objectstore)."""
    root = partition["shards"]
    if not objectstore.is_uri(root):
        return Path(root)
    cache = Path(partition.get("cache") or Path(os.environ.get("CUDAWATCH_SHARD_CACHE") or "shard-cache") / partition["name"])
    objectstore.mirror_hours(root, cache, [hour - h * HOUR for h in range(LATE_SHARD_HOURS, -1, -1)])
    return cache


@dataclass
class CatchUp:
    """What ``catch_up`` did: the hours it analysed and the regressions reported up to ``as_of``."""

    as_of: dt.datetime | None
    hours: list[dt.datetime]
    regressions: list[Regression]


def pending_hours(con, as_of: dt.datetime | None = None, *, lookback_hours: int = LOOKBACK_HOURS) -> tuple[dt.datetime | None, list[dt.datetime]]:
    """(as_of, the hours not yet analysed up to it): after the last analysed hour, or on a fresh
    warehouse from the first hour of data (at most ``lookback_hours`` back)."""
    as_of = hour_floor(as_of) if as_of is not None else hours.latest_hour(con)
    if as_of is None:
        return None, []
    last = hours.last_analysed_hour(con)
    if last is not None:
        start = last + HOUR
    else:
        first = hours.first_hour(con)
        start = max(first or as_of, as_of - (lookback_hours - 1) * HOUR)
    n = int((as_of - start) / HOUR) + 1
    return as_of, [start + i * HOUR for i in range(max(n, 0))]


def catch_up(store: Store, as_of: dt.datetime | str | None = None, *, lookback_hours: int = LOOKBACK_HOURS,
             progress: Callable[[int, dt.datetime], None] | None = None) -> CatchUp:
    """Analyse every hour not yet analysed up to ``as_of`` (default: the latest hour of data),
    oldest first, with ``run_hour``'s analysis stages; then return the regressions first reported
    in the ``lookback_hours`` up to ``as_of``. Re-running analyses nothing and returns the same.

    progress(total, hour) is called once with (total, None) and then after each hour.
    """
    with store.writer() as con:
        as_of, todo = pending_hours(con, as_of if as_of is None else hour_floor(as_of), lookback_hours=lookback_hours)
        if as_of is None:
            return CatchUp(None, [], [])
        if progress:
            progress(len(todo), None)
        for h in todo:
            run_hour(store, h, stages=ANALYSIS)
            if progress:
                progress(len(todo), h)
        reported = reported_since(con, as_of - (lookback_hours - 1) * HOUR, as_of)
    return CatchUp(as_of, todo, reported)
