"""Real Airflow 3 for the DAG tests: a throw-away AIRFLOW_HOME with a SQLite metadata database.

Airflow reads its configuration when it is first imported, so the environment is set here, at
import time, before any test module imports airflow. One database is migrated per session and
shared by the tests (each test uses its own shard root, warehouse and logical dates).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="cudawatch-airflow-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
}
if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(AIRFLOW_HOME):
    # Another test module imported airflow with a different configuration first.
    raise RuntimeError("tests/dags must configure Airflow before it is imported; run them in their own pytest process")
os.environ.update(AIRFLOW_ENV)
# Keep a developer's own cudawatch settings out of the tests.
for _name in [n for n in os.environ if n.startswith("CUDAWATCH_") or n.startswith("AIRFLOW_VAR_CUDAWATCH") or n.startswith("AIRFLOW_CONN_")]:
    del os.environ[_name]

UTC = dt.timezone.utc
START = dt.datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(scope="session")
def airflow_db():
    """The migrated metadata database and the warehouse pool (size 1)."""
    from airflow.models.pool import Pool
    from airflow.utils import db

    db.initdb()
    Pool.create_or_update_pool("cudawatch_duckdb", slots=1, description="cudawatch DuckDB writers", include_deferred=False)
    return AIRFLOW_HOME


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def cudawatch_env(tmp_path, monkeypatch):
    """Point the pipeline at fresh shard, warehouse and report folders (environment fallbacks)."""
    paths = {"shards": tmp_path / "shards", "db": tmp_path / "cudawatch.duckdb", "reports": tmp_path / "reports"}
    monkeypatch.setenv("CUDAWATCH_SHARDS", str(paths["shards"]))
    monkeypatch.setenv("CUDAWATCH_DB", str(paths["db"]))
    monkeypatch.setenv("CUDAWATCH_REPORTS", str(paths["reports"]))
    monkeypatch.setenv("CUDAWATCH_LOCK_TIMEOUT_S", "60")
    return paths


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server API)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(monkeypatch):
    """A loopback HTTP server receiving the generic webhook alerts (CUDAWATCH_WEBHOOK_URL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
    yield server.received
    server.shutdown()
    server.server_close()


def run_dag(dagbag, dag_id: str, logical_date: dt.datetime):
    """dag.test() for one logical date; returns the finished DagRun."""
    dag = dagbag.get_dag(dag_id)
    assert dag is not None, dagbag.import_errors
    # A failing task fails the test at once instead of waiting out its retry back-off.
    retries = {t.task_id: t.retries for t in dag.tasks}
    for t in dag.tasks:
        t.retries = 0
    try:
        return dag.test(logical_date=logical_date)
    finally:
        for t in dag.tasks:
            t.retries = retries[t.task_id]


def task_states(dagrun) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"): str(ti.state)
                for ti in dagrun.get_task_instances(session=session)}


@pytest.fixture
def smtp_server(monkeypatch):
    """A real SMTP server on loopback (aiosmtpd), reachable as Airflow connection ``smtp_default``.

    Yields the received mails as (envelope sender, recipients, parsed EmailMessage)."""
    import socket
    from email import policy
    from email.parser import BytesParser

    from aiosmtpd.controller import Controller

    inbox: list = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd hook name)
            msg = BytesParser(policy=policy.default).parsebytes(envelope.original_content or envelope.content)
            inbox.append((envelope.mail_from, list(envelope.rcpt_tos), msg))
            return "250 OK"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctl = Controller(Handler(), hostname="127.0.0.1", port=port)
    ctl.start()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "cudawatch@example.com", "retry_limit": 0},
    }))
    yield inbox
    ctl.stop()
