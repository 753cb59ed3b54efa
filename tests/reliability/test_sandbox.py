"""The query sandbox: DuckDB refuses every write, file access, extension and setting change;
one SELECT/EXPLAIN per call (analytics.store.sandbox, through analytics.store.query)."""

from __future__ import annotations

import duckdb
import pytest

from analytics.store import query as sandboxed_query
from analytics.store.sandbox import QueryError, check_statement


@pytest.fixture()
def dbs(tmp_path):
    db, other = tmp_path / "w.duckdb", tmp_path / "other.duckdb"
    for path in (db, other):
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE kernels AS SELECT range AS i, 'k' || range AS kernel FROM range(5)")
        con.close()
    (tmp_path / "existing.csv").write_text("precious\n")
    return db, other, tmp_path


def test_select_works_and_returns_arrow(dbs):
    db, _, _ = dbs
    assert sandboxed_query(db, "SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": 5}]
    assert sandboxed_query(db, "FROM kernels SELECT max(i) AS m").to_pylist() == [{"m": 4}]
    assert sandboxed_query(db, "WITH a AS (SELECT 1 AS x) SELECT * FROM a").num_rows == 1
    assert sandboxed_query(db, "DESCRIBE kernels").num_rows == 2
    assert sandboxed_query(db, "EXPLAIN SELECT * FROM kernels").num_rows >= 1


@pytest.mark.parametrize("sql, words", [
    ("SELECT * FROM read_csv('/etc/passwd')", "file system operations are disabled"),
    ("SELECT * FROM read_text('/etc/passwd')", "file system operations are disabled"),
    ("SELECT * FROM read_blob('/etc/passwd')", "file system operations are disabled"),
    ("SELECT * FROM glob('/root/*')", "file system operations are disabled"),
    ("SELECT * FROM '{tmp}/existing.csv'", "file system operations are disabled"),
    ("SELECT * FROM sniff_csv('/etc/passwd')", "file system operations are disabled"),
])
def test_file_access_is_refused_by_duckdb(dbs, sql, words):
    db, _, tmp = dbs
    with pytest.raises(QueryError) as exc:
        sandboxed_query(db, sql.format(tmp=tmp))
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert (tmp / "existing.csv").read_text() == "precious\n"


@pytest.mark.parametrize("sql, kind", [
    ("COPY kernels TO '{tmp}/x.csv'", "COPY"),
    ("COPY kernels TO '{tmp}/existing.csv'", "COPY"),
    ("COPY (SELECT 1) TO '{tmp}/y.parquet' (FORMAT parquet)", "COPY"),
    ("EXPORT DATABASE '{tmp}/export'", "EXPORT"),
    ("ATTACH '{other}' AS o (READ_WRITE)", "ATTACH"),
    ("DETACH o", "DETACH"),
    ("INSTALL httpfs", "LOAD"),
    ("LOAD httpfs", "LOAD"),
    ("SET threads = 1", "SET"),
    ("SET enable_external_access = true", "SET"),
    ("RESET lock_configuration", "SET"),
    ("PRAGMA threads = 1", "SET"),
    ("PRAGMA database_list", "PRAGMA"),
    ("CHECKPOINT", "CALL"),
    ("CALL pragma_version()", "CALL"),
    ("VACUUM", "VACUUM"),
    ("BEGIN", "TRANSACTION"),
    ("DELETE FROM kernels", "DELETE"),
    ("CREATE TABLE t AS SELECT 1", "CREATE"),
    ("USE memory", "SET"),
])
def test_non_select_statements_are_refused(dbs, sql, kind):
    db, other, tmp = dbs
    with pytest.raises(QueryError, match=f"{kind} statements are refused"):
        sandboxed_query(db, sql.format(other=other, tmp=tmp))
    assert (tmp / "existing.csv").read_text() == "precious\n"
    assert not (tmp / "x.csv").exists() and not (tmp / "export").exists() and not (tmp / "y.parquet").exists()
    con = duckdb.connect(str(other), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone() == (5,)
    con.close()


def test_attach_and_delete_in_one_call_is_refused_and_other_db_is_intact(dbs):
    db, other, _ = dbs
    with pytest.raises(QueryError, match="exactly one SQL statement, got 2"):
        sandboxed_query(db, f"ATTACH '{other}' AS o (READ_WRITE); DELETE FROM o.kernels")
    con = duckdb.connect(str(other), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone() == (5,)
    con.close()


def test_duckdb_itself_refuses_what_the_statement_check_would_let_through(dbs):
    """The statement check is the second lock: with it bypassed, DuckDB's settings still hold."""
    from analytics.store.sandbox import connect_sandboxed

    db, other, tmp = dbs
    con = connect_sandboxed(db)
    try:
        for sql in (f"ATTACH '{other}' AS o", "SET enable_external_access = true", "SET lock_configuration = false",
                    f"COPY kernels TO '{tmp}/z.csv'", "LOAD httpfs", "INSTALL httpfs", "DELETE FROM kernels"):
            with pytest.raises(duckdb.Error):
                con.execute(sql)
        assert con.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
    finally:
        con.close()
    assert not (tmp / "z.csv").exists()


@pytest.mark.parametrize("sql", ["", "   ", "SELECT 1; SELECT 2", "SELEC 1"])
def test_empty_multiple_or_unparsable_sql(sql):
    with pytest.raises(QueryError) as exc:
        check_statement(sql)
    assert "\n" not in str(exc.value)
