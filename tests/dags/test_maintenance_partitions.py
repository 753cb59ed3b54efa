"""The maintenance DAG on the partitioned layout: compaction, retention and checkpoint run once
per partition, mapped, each on its own shard root and warehouse file; the report archive once."""

from __future__ import annotations

import datetime as dt

import duckdb

from analytics import store
from analytics.store import partition_db
from cudawatch import shards as sh
from tests.dags.conftest import START, run_dag, task_states

HOUR = dt.timedelta(hours=1)


def _rows(db) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in sh.SCHEMAS}
        has = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'shard_compactions'").fetchall()[0][0]
        out["compactions"] = con.execute("SELECT count(*) FROM shard_compactions").fetchall()[0][0] if has else 0
        return out
    finally:
        con.close()


def test_maintenance_dag_runs_per_partition(dagbag, tmp_path, monkeypatch):
    from simulator import simulate_fleet

    pdir = tmp_path / "warehouses"
    roots, before = {}, {}
    for name, seed in (("east", 5), ("west", 6)):
        roots[name] = tmp_path / name
        # 16 GPUs: two hosts, so two small shards per table and hour to merge
        simulate_fleet(roots[name], gpus=16, hours=6, seed=seed, start=START, injections=[])
        with store.Store(partition_db(pdir, name)).writer() as con:
            store.ingest_shards(roots[name], con)
        before[name] = {t: n for t, n in _rows(partition_db(pdir, name)).items() if t != "compactions"}
    (tmp_path / "reports" / "2025-01-01").mkdir(parents=True)
    for key, value in {"CUDAWATCH_DB": str(pdir), "CUDAWATCH_WAREHOUSE_LAYOUT": "partitioned",
                       "CUDAWATCH_PARTITIONS": ",".join(f"{n}={r}" for n, r in roots.items()),
                       "CUDAWATCH_SHARDS": str(tmp_path / "unused"), "CUDAWATCH_REPORTS": str(tmp_path / "reports"),
                       "CUDAWATCH_COMPACT_AFTER_H": "2"}.items():
        monkeypatch.setenv(key, value)
    # The run of 2026-11-01 04:30 ends its interval in hour 04: hours before 02:00 are settled.
    dr = run_dag(dagbag, "cudawatch_maintenance", START + dt.timedelta(hours=4, minutes=30))
    states = task_states(dr)
    assert str(dr.state) == "success", states
    for task in ("compact_shards", "apply_retention", "checkpoint"):
        assert {k for k in states if k.startswith(task + "[")} == {f"{task}[0]", f"{task}[1]"}, states
    assert states["expire_reports"] == "success"
    for name, root in roots.items():
        assert [len(sh.list_shards(root, "kernels", START + h * HOUR)) for h in range(6)] == [1, 1, 2, 2, 2, 2], name
        after = _rows(partition_db(pdir, name))
        assert after.pop("compactions") == 2 * 4 * 2  # two hours x four tables x two merged shards, in its own file
        assert after == before[name]
        # a second ingest of the compacted root loads nothing (the merge is in this partition's ledger)
        with store.Store(partition_db(pdir, name)).writer() as con:
            assert store.ingest_shards(root, con).loaded == 0
    assert not (tmp_path / "reports" / "2025-01-01").exists()
    assert sorted(p.name for p in pdir.glob("*.duckdb")) == ["east.duckdb", "west.duckdb"]
