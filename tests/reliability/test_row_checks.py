"""Ingest's SQL validation (``analytics.store.row_checks``) against the reference rules of
``analytics.validate``, row by row on arbitrary values; and ingest's fast insert against its exact
per-column dedupe on a fleet with re-sent shards."""

from __future__ import annotations

import datetime as dt
import shutil

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given

import simulator
from analytics import store
from analytics.store import ingest as ingest_mod
from analytics.store import ingest_read, row_checks
from analytics.validate import reasons_for
from cudawatch import limits
from cudawatch import shards as sh

from .test_properties import HOUR, NOW, PROFILE
from .test_properties import rows as shard_rows


def _reference_reasons(table: str, data: pa.Table) -> list[str | None]:
    """The reason ``analytics.validate`` charges each row (None: the row passes)."""
    out: list[str | None] = [None] * data.num_rows
    for reason, bad in reasons_for(table, data, HOUR, NOW):
        for i, b in enumerate(bad.to_pylist()):
            if b and out[i] is None:
                out[i] = reason
    return out


def _sql_reasons(table: str, data: pa.Table) -> list[str | None]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("d", data.append_column("_i", pa.array(range(data.num_rows), pa.int64())))
    lo, hi = HOUR - limits.PARTITION_SKEW, HOUR + dt.timedelta(hours=1) + limits.PARTITION_SKEW
    got = con.execute(f"SELECT _i, {row_checks.reason_sql(table, NOW)} FROM (SELECT *, ?::TIMESTAMPTZ AS _lo, "
                      f"?::TIMESTAMPTZ AS _hi FROM d) ORDER BY _i", [lo, hi]).fetchall()
    con.close()
    return [r for _, r in got]


@pytest.mark.parametrize("table", list(sh.SCHEMAS))
def test_sql_rules_charge_every_row_as_the_reference_does(table):
    @PROFILE
    @given(data=shard_rows(table))
    def check(data):
        assert _sql_reasons(table, data) == _reference_reasons(table, data)

    check()


def test_sql_rules_keep_the_reference_order():
    for table in sh.SCHEMAS:
        data = pa.Table.from_pylist([], schema=sh.SCHEMAS[table])
        assert [r for r, _ in row_checks.rules(table, NOW)] == [r for r, _ in reasons_for(table, data, HOUR, NOW)]


def test_v2_health_shards_take_the_fast_reader(tmp_path):
    """A health shard of the current contract (v2) is proved by its footer, not read file by file."""
    sim = tmp_path / "s"
    simulator.simulate_fleet(sim, gpus=8, hours=1, seed=3, start=HOUR)
    for table in sh.SCHEMAS:
        for path in sh.list_shards(sim, table):
            proved = ingest_read.footer_proves_contract(path, table)
            assert proved is not None, path
            assert proved[1] == pq.read_metadata(path).num_rows


def _tables(db) -> dict[str, list]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {t: con.execute(f"SELECT * EXCLUDE (shard_id) FROM {t} ORDER BY ALL").fetchall() for t in sh.SCHEMAS}
        out["rejected"] = con.execute("SELECT path, table_name, reason, rows FROM rejected_rows ORDER BY ALL").fetchall()
        out["ledger"] = con.execute("SELECT path, table_name, rows FROM shard_ledger ORDER BY ALL").fetchall()
        return out
    finally:
        con.close()


def test_hash_shortcut_and_exact_dedupe_load_the_same(tmp_path, monkeypatch):
    """Re-sent shards (a copy in the same hour, so the same batch, and a copy whose rows another
    batch already loaded) are counted once whether the key-hash check lets the batch through or
    the exact dedupe runs; and every table ends with distinct content keys."""
    root = tmp_path / "s"
    simulator.simulate_fleet(root, gpus=16, hours=3, seed=11, start=HOUR)
    for table in sh.SCHEMAS:
        first = sh.list_shards(root, table, HOUR)[0]
        shutil.copy(first, first.with_name("zz-copy-same-hour.parquet"))
    late = sh.list_shards(root, "kernels", HOUR + dt.timedelta(hours=1))[0]
    twin = late.with_name("zz-late-copy.parquet")
    outcomes = []
    for exact in (False, True):
        if exact:
            monkeypatch.setattr(ingest_mod, "_keys_distinct", lambda *a: False)
        db = tmp_path / f"w{exact}.duckdb"
        with store.Store(db).writer() as con:
            first = store.ingest_shards(root, con, now=NOW)
            shutil.copy(late, twin)  # its rows were loaded by the first call
            second = store.ingest_shards(root, con, now=NOW)
            twin.unlink()
            for t in sh.SCHEMAS:
                keys = ", ".join(ingest_mod.CONTENT_KEY[t])
                n, distinct = con.execute(f"SELECT count(*), count(DISTINCT ({keys})) FROM {t}").fetchall()[0]
                assert n == distinct, t
        assert first.quarantined == [] and second.loaded == 1
        assert sum(second.rows.values()) == 0 and second.rejected == {"duplicate": pq.read_metadata(late).num_rows}
        assert first.rejected == {"duplicate": sum(pq.read_metadata(sh.list_shards(root, t, HOUR)[0]).num_rows
                                                   for t in sh.SCHEMAS)}
        outcomes.append((first.rows, _tables(db)))
    assert outcomes[0][0] == outcomes[1][0]
    fast, exact = outcomes[0][1], outcomes[1][1]
    assert fast == exact


def test_footer_shortcut_still_checks_schema_version(tmp_path):
    """A shard of a Parquet schema already proved to be the contract's is still refused by the
    footer, and quarantined by the checked reader, when its schema_version is one nobody knows."""
    sim = tmp_path / "s"
    simulator.simulate_fleet(sim, gpus=8, hours=1, seed=4, start=HOUR)
    good = sh.list_shards(sim, "kernels")[0]
    assert ingest_read.footer_proves_contract(good, "kernels") is not None
    data = pq.read_table(good)
    i = data.schema.get_field_index("schema_version")
    future = data.set_column(i, data.schema.field(i), pa.array([9] * data.num_rows, pa.int16()))
    bad = good.with_name("zz-future.parquet")
    pq.write_table(future, bad, compression="zstd")
    assert pq.read_metadata(bad).schema.equals(pq.read_metadata(good).schema)
    assert ingest_read.footer_proves_contract(bad, "kernels") is None
    with store.Store(tmp_path / "w.duckdb").writer() as con:
        result = store.ingest_shards(sim, con, now=NOW)
    assert [(p, "schema_version [9] unsupported" in r) for p, r in result.quarantined] == [(bad.relative_to(sim).as_posix(), True)]
