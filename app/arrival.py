"""Shard arrival for the hourly sensor: who sent shards for an hour, who is still missing.

From file names only (no warehouse access, no shard reads), so the sensor is cheap to poke.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

from analytics.store.maintenance import COMPACTED_HOST, hosts_of_compacted
from app.settings import Settings
from cudawatch import objectstore
from cudawatch import shards as sh
from cudawatch.shards import hour_floor

log = logging.getLogger(__name__)

UTC = dt.timezone.utc


def _host_of(path: Path) -> str:
    """Host of a shard file named ``<host>-<pid>-<uuid>.parquet`` (cudawatch.shards.shard_name)."""
    parts = path.stem.rsplit("-", 2)
    return parts[0] if len(parts) == 3 else path.stem


def _present(root: Path | str, hour: dt.datetime) -> set[tuple[str, str]]:
    out = set()
    if objectstore.is_uri(root):  # object names only (a compacted object counts as its own host)
        for table in sh.SCHEMAS:
            h = hour_floor(hour)
            for rel in objectstore.list_objects(str(root), f"{table}/date={h:%Y-%m-%d}/hour={h:%H}"):
                if rel.endswith(".parquet"):
                    out.add((_host_of(Path(rel)), table))
        return out
    for p in sh.list_shards(root, None, hour):
        host = _host_of(p)
        hosts = hosts_of_compacted(p) if host == COMPACTED_HOST else {host}
        out.update((h, sh.table_of(p)) for h in hosts)
    return out


def arrival(partition: dict[str, str], hour: dt.datetime, lookback_h: int) -> dict[str, Any]:
    """Which (host, table) pairs sent shards for ``hour``, and which seen in the previous
    ``lookback_h`` hours did not (from file names only: no warehouse access, no shard reads)."""
    root = partition["shards"] if objectstore.is_uri(partition["shards"]) else Path(partition["shards"])
    present = _present(root, hour)
    last_seen: dict[tuple[str, str], dt.datetime] = {}
    for back in range(lookback_h, 0, -1):
        h = hour - dt.timedelta(hours=back)
        for key in _present(root, h):
            last_seen[key] = h
    missing = sorted(set(last_seen) - present)
    return {
        "partition": partition,
        "hour": hour.isoformat(),
        "present": sorted(present),
        "missing": [[host, table, last_seen[(host, table)].isoformat()] for host, table in missing],
    }


def check_arrival(partition: dict[str, str], hour: dt.datetime | str, now: dt.datetime | None = None) -> tuple[bool, dict]:
    """The sensor's poke: done when every expected host sent its shards (and at least one shard
    arrived), or when the grace period
    after the hour has passed (then the pipeline proceeds with what arrived; ``ingest_hour``
    records the rest in ``data_gaps``). ``now`` is only used for that deadline."""
    cfg = Settings.resolve()
    hour = hour_floor(hour)
    info = arrival(partition, hour, cfg.expect_lookback_h)
    deadline = hour + dt.timedelta(hours=1, minutes=cfg.wait_grace_min)
    now = now or dt.datetime.now(UTC)
    # Nothing at all yet (a new deployment, or the whole partition late) also waits for the grace.
    done = (bool(info["present"]) and not info["missing"]) or now >= deadline
    if done and info["missing"]:
        log.warning("hour %s partition %s: proceeding without %d expected (host, table) shards: %s",
                    hour.isoformat(), partition["name"], len(info["missing"]), info["missing"][:10])
    elif not done:
        log.info("hour %s partition %s: waiting for %d (host, table) shards until %s",
                 hour.isoformat(), partition["name"], len(info["missing"]), deadline.isoformat())
    return done, info


#: How many earlier hours each hourly ingest re-scans for shards that arrived late.
