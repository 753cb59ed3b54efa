"""Queries about hours: the data's extent, which hours were analysed, and recorded data gaps."""

from __future__ import annotations

import datetime as dt

from analytics.store.tx import transaction

UTC = dt.timezone.utc


def _utc(ts: dt.datetime | None) -> dt.datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def latest_hour(con) -> dt.datetime | None:
    """The last UTC hour with kernel data in the warehouse (None when empty)."""
    return _utc(con.execute("SELECT max(date_trunc('hour', window_start)) FROM kernels").fetchone()[0])


def first_hour(con) -> dt.datetime | None:
    """The first UTC hour with kernel data in the warehouse (None when empty)."""
    return _utc(con.execute("SELECT min(date_trunc('hour', window_start)) FROM kernels").fetchone()[0])


def last_analysed_hour(con) -> dt.datetime | None:
    """The latest hour the hourly analysis ran for (CLI or Airflow), None before the first run."""
    return _utc(con.execute("SELECT max(hour) FROM analysed_hours").fetchone()[0])


def mark_analysed(con, hour: dt.datetime) -> None:
    """Record that ``hour`` was analysed (a re-run keeps the first record)."""
    con.execute("INSERT INTO analysed_hours (hour) VALUES (?) ON CONFLICT (hour) DO NOTHING", [hour])


def replace_gaps(con, hour: dt.datetime, partition: str, missing: list[tuple[str, str, dt.datetime]]) -> None:
    """Make ``missing`` ((host, table, last_seen) triples) the data gaps of ``hour`` in ``partition``."""
    with transaction(con):
        con.execute("DELETE FROM data_gaps WHERE hour = ? AND partition_name = ?", [hour, partition])
        if missing:
            con.executemany(
                "INSERT INTO data_gaps (hour, partition_name, host, table_name, last_seen) VALUES (?, ?, ?, ?, ?)",
                [(hour, partition, host, table, seen) for host, table, seen in missing],
            )
