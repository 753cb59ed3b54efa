"""DuckDB threads, memory limit and temp directory from configuration, applied at connect."""

from __future__ import annotations

import pytest

from analytics.store import Store, connect, query
from app.settings import Settings
from cudawatch.config import ConfigError, DuckDBConfig


def _current(con, name: str) -> str:
    return str(con.execute(f"SELECT current_setting('{name}')").fetchone()[0])


def test_environment_sets_threads_memory_and_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAWATCH_DUCKDB_THREADS", "1")
    monkeypatch.setenv("CUDAWATCH_DUCKDB_MEMORY_LIMIT", "300MB")
    monkeypatch.setenv("CUDAWATCH_DUCKDB_TEMP_DIR", str(tmp_path / "spill"))
    con = connect(tmp_path / "w.duckdb")
    assert _current(con, "threads") == "1"
    assert _current(con, "memory_limit") == "286.1 MiB"  # DuckDB reports 300 MB in MiB
    assert _current(con, "temp_directory") == str(tmp_path / "spill")
    # The limit is real: a sort bigger than it spills into the temp directory and still finishes.
    n = con.execute("SELECT count(*) FROM (SELECT range AS i, md5(range::VARCHAR) AS s FROM range(2000000) ORDER BY s)").fetchone()[0]
    assert n == 2_000_000
    con.close()
    with Store(tmp_path / "w.duckdb").reader() as ro:
        assert _current(ro, "threads") == "1"
    assert query(tmp_path / "w.duckdb", "SELECT current_setting('threads') AS t").column("t")[0].as_py() == 1


def test_explicit_resources_and_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAWATCH_DUCKDB_THREADS", raising=False)
    monkeypatch.setenv("CUDAWATCH_DUCKDB_MEMORY_LIMIT", "1GiB")
    s = Settings.resolve()
    assert s.duckdb == DuckDBConfig(memory_limit="1GiB")
    store = Store(tmp_path / "w.duckdb", resources=DuckDBConfig(threads=2, memory_limit="512MiB"))
    with store.writer() as con:
        assert _current(con, "threads") == "2" and _current(con, "memory_limit") == "512.0 MiB"


@pytest.mark.parametrize("env, message", [
    ({"CUDAWATCH_DUCKDB_THREADS": "two"}, "CUDAWATCH_DUCKDB_THREADS='two' is not an integer"),
    ({"CUDAWATCH_DUCKDB_THREADS": "0"}, "must be at least 1"),
    ({"CUDAWATCH_DUCKDB_MEMORY_LIMIT": "lots"}, "is not a size like 4GB"),
    ({"CUDAWATCH_DUCKDB_MEMORY_LIMIT": "4GB; DROP TABLE x"}, "is not a size"),
])
def test_bad_values_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        DuckDBConfig.from_env(env)
