"""DAG integrity: the DAG folder parses without errors, lookups or heavy imports, and every DAG
carries retries with backoff, tags, docs and the warehouse pool on its writing tasks."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from tests.dags.conftest import DAGS

DAG_IDS = {"cudawatch_hourly", "cudawatch_daily_report", "cudawatch_maintenance"}
WRITERS = {
    "cudawatch_hourly": {"ingest", "update_baselines", "detect", "root_cause", "send_alerts"},
    "cudawatch_daily_report": {"build_report"},
    "cudawatch_maintenance": {"compact_shards", "apply_retention", "checkpoint"},
}


def test_dag_folder_imports_cleanly(dagbag):
    assert dagbag.import_errors == {}
    assert DAG_IDS <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dag_conventions(dagbag, dag_id):
    dag = dagbag.get_dag(dag_id)
    assert dag.tags and "cudawatch" in dag.tags
    assert dag.doc_md and dag.doc_md.strip().startswith("### cudawatch")
    assert dag.max_active_runs == 1
    for t in dag.tasks:
        assert t.retries >= 2, t.task_id
        assert t.retry_exponential_backoff, t.task_id
        assert t.execution_timeout is not None, t.task_id
    pooled = {t.task_id for t in dag.tasks if t.pool == "cudawatch_duckdb"}
    assert pooled == WRITERS[dag_id]


def test_hourly_schedule_and_mapping(dagbag):
    dag = dagbag.get_dag("cudawatch_hourly")
    assert dag.catchup is True
    assert dag.timetable.expression == "0 * * * *"
    assert dag.timetable.interval == dt.timedelta(hours=1)  # data_interval_start is the hour analysed
    # The sensor and the ingest are mapped over partitions (dynamic task mapping).
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    mapped = {t.task_id for t in dag.tasks if isinstance(t, MappedOperator)}
    assert mapped == {"wait_for_shards", "ingest"}
    assert [t.task_id for t in dag.topological_sort()] == [
        "partitions", "wait_for_shards", "ingest", "warehouses", "update_baselines", "detect", "root_cause", "send_alerts"]
    # The analysis chain is a task group mapped over the warehouse files (one, or one per partition).
    group = dag.task_group_dict["analyse"]
    assert type(group).__name__ == "MappedTaskGroup"
    assert {t.task_id for t in group} == {"update_baselines", "detect", "root_cause", "send_alerts"}


PARSE_PROBE = r"""
import json, sys
from unittest import mock
calls = []
def deny(name):
    def f(*a, **k):
        calls.append(name)
        raise AssertionError(name + " called while parsing")
    return f
from airflow.sdk import BaseHook, Connection, Variable
from airflow.models.variable import Variable as ModelVariable
from airflow.models.connection import Connection as ModelConnection
with mock.patch.object(Variable, "get", deny("Variable.get")), \
     mock.patch.object(ModelVariable, "get", deny("models.Variable.get")), \
     mock.patch.object(Connection, "get", deny("Connection.get")), \
     mock.patch.object(ModelConnection, "get_connection_from_secrets", deny("Connection.get_connection_from_secrets")), \
     mock.patch.object(BaseHook, "get_connection", deny("BaseHook.get_connection")):
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(m for m in ("duckdb", "pyarrow", "scipy", "matplotlib", "analytics", "app.steps", "reports") if m in sys.modules)
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids), "calls": calls, "heavy": heavy}))
"""


def test_parsing_makes_no_lookups_and_no_heavy_imports(airflow_db):
    """Parse the DAG folder in a fresh interpreter with Variable and Connection lookups denied."""
    out = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(DAGS)], capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert set(result["dags"]) == DAG_IDS
    assert result["calls"] == []
    assert result["heavy"] == []


def test_parse_probe_catches_a_lookup(airflow_db, tmp_path):
    """The probe above is not vacuous: a DAG file that reads a Variable at top level is caught."""
    (tmp_path / "bad_dag.py").write_text(
        "from airflow.sdk import Variable, dag\n"
        "ROOT = Variable.get('cudawatch_shards', default=None)\n"
        "@dag(schedule=None)\n"
        "def bad():\n    pass\n"
        "bad()\n"
    )
    out = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(tmp_path)], capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["calls"] == ["Variable.get"]
    assert result["errors"]  # the denied lookup made the file fail to import
