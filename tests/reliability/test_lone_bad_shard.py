"""Unreadable shards are quarantined with their reason while the rest load (reviewer findings:
a batch of only unreadable shards built an empty SQL source and crashed the ingest, every run)."""

from __future__ import annotations

import datetime as dt

import simulator
from analytics import store
from cudawatch import shards as sh

HOUR = dt.datetime(2026, 11, 2, 10, tzinfo=dt.timezone.utc)


def test_a_lone_corrupt_shard_is_quarantined_not_a_crash(tmp_path):
    sim = tmp_path / "s"
    simulator.simulate_fleet(sim, gpus=2, hours=1, seed=4, start=HOUR)
    now = HOUR + dt.timedelta(hours=3)
    with store.Store(tmp_path / "w.duckdb").writer() as con:
        first = store.ingest_shards(sim, con, now=now, tables=("kernels",))
        assert first.loaded == 1 and first.quarantined == []
        rows = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
        bad = sh.list_shards(sim, "kernels")[0].with_name("zz-garbage.parquet")
        bad.write_bytes(b"not parquet at all")
        second = store.ingest_shards(sim, con, now=now, tables=("kernels",))
        assert second.loaded == 0
        assert [p for p, _ in second.quarantined] == ["kernels/date=2026-11-02/hour=10/zz-garbage.parquet"]
        assert "not a readable Parquet file" in second.quarantined[0][1]
        assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == rows
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1


def test_a_corrupt_data_page_behind_an_intact_footer_is_quarantined_while_the_rest_load(tmp_path):
    """The footer passes the contract check, so DuckDB's reader takes the shard and fails on its
    page (not a cast error): the batch goes through the per-shard reader instead of failing whole."""
    sim = tmp_path / "s"
    simulator.simulate_fleet(sim, gpus=2, hours=1, seed=4, start=HOUR)
    good = sh.list_shards(sim, "kernels")
    raw = bytearray(good[0].read_bytes())
    for i in range(8, min(len(raw) - 2000, 3000)):
        raw[i] ^= 0x5A
    bad = good[0].with_name("zz-page.parquet")
    bad.write_bytes(bytes(raw))
    expected = sum(sh.read_shard(p, "kernels").num_rows for p in good)
    with store.Store(tmp_path / "w.duckdb").writer() as con:
        res = store.ingest_shards(sim, con, now=HOUR + dt.timedelta(hours=3), tables=("kernels",))
        assert res.loaded == len(good)
        assert [p for p, _ in res.quarantined] == ["kernels/date=2026-11-02/hour=10/zz-page.parquet"]
        assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == expected
