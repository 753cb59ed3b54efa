"""A throw-away Airflow 3 CeleryExecutor deployment on loopback, for tests/scale/test_celery.py.

PostgreSQL (Debian's binaries, a fresh cluster in a temporary folder, Unix socket only) as the
metadata database and Celery result backend, Redis on 127.0.0.1 as the broker, then Airflow's
api-server (the Task SDK's execution API), scheduler, dag-processor and two Celery workers. Every
process is started here with ``subprocess.Popen`` in its own session and stopped by its PID
(SIGTERM to its process group, SIGKILL after a grace period) -- never by name.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def missing() -> list[str]:
    """What this machine lacks for the Celery run (empty: ready)."""
    out = []
    if not shutil.which("redis-server"):
        out.append("redis-server (Debian package redis-server)")
    if postgres_bin() is None:
        out.append("PostgreSQL server (Debian package postgresql)")
    for mod in ("airflow.providers.celery", "psycopg2", "redis"):
        try:
            __import__(mod)
        except ImportError:
            out.append(f"python module {mod} (pip extra [celery])")
    return out


class Stack:
    """Start with ``start()``, stop with ``stop()`` (always, in a finally)."""

    def __init__(self, work: Path, cudawatch_env: dict[str, str], dag_files: list[Path]) -> None:
        self.work = work
        self.procs: list[tuple[str, subprocess.Popen]] = []
        # outside pytest's private (0700) folders: the postgres user must reach it
        self.pg_root = Path(tempfile.mkdtemp(prefix="cudawatch-pg-"))
        self.pg_data = self.pg_root / "data"
        self.pg_sock = self.pg_root / "sock"
        self.pg_port = free_port()
        self.redis_port = free_port()
        self.api_port = free_port()
        self.dags = work / "dags"
        self.dags.mkdir(parents=True)
        for f in dag_files:
            shutil.copy(f, self.dags / f.name)
        db = f"postgresql+psycopg2://postgres@/airflow?host={self.pg_sock}&port={self.pg_port}"
        self.db_url = db
        self.broker = f"redis://127.0.0.1:{self.redis_port}/0"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CUDAWATCH_"))}
        self.env = {
            **base,
            "PYTHONPATH": str(REPO),
            "AIRFLOW_HOME": str(work / "airflow"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
            "AIRFLOW__CELERY__BROKER_URL": self.broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://postgres@/airflow?host={self.pg_sock}&port={self.pg_port}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.api_port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            **cudawatch_env,
        }
        (work / "airflow").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, argv: list[str], **kw) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=kw.pop("env", self.env),
                                start_new_session=True, **kw)
        self.procs.append((name, proc))
        return proc

    def _run(self, argv: list[str], *, timeout: float = 180, env=None) -> str:
        out = subprocess.run(argv, env=env or self.env, capture_output=True, text=True, timeout=timeout)
        if out.returncode:
            raise RuntimeError(f"{' '.join(argv[:3])} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out.stdout

    def _as_postgres(self, argv: list[str]) -> list[str]:
        return argv if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]

    def start_postgres(self) -> None:
        pg = postgres_bin()
        for d in (self.pg_data, self.pg_sock):
            d.mkdir(parents=True)
        if os.geteuid() == 0:  # the server refuses to run as root: Debian's postgres user owns the cluster
            for d in (self.pg_root, self.pg_data, self.pg_sock):
                shutil.chown(d, "postgres")
        self._run(self._as_postgres([str(pg / "initdb"), "-D", str(self.pg_data), "-U", "postgres", "-A", "trust",
                                     "--no-sync"]))
        self._spawn("postgres", self._as_postgres([
            str(pg / "postgres"), "-D", str(self.pg_data), "-p", str(self.pg_port), "-k", str(self.pg_sock),
            "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=200"]))
        import psycopg2

        deadline = time.monotonic() + 60
        while True:
            try:
                con = psycopg2.connect(host=str(self.pg_sock), port=self.pg_port, user="postgres", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        con.autocommit = True
        con.cursor().execute("CREATE DATABASE airflow")
        con.close()

    def start_redis(self) -> None:
        self._spawn("redis", ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", str(self.work)])
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis(port=self.redis_port).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def start(self, pool_slots: int) -> None:
        self.start_postgres()
        self.start_redis()
        airflow = [sys.executable, "-m", "airflow"]
        self._run(airflow + ["db", "migrate"], timeout=300)
        self._run(airflow + ["pools", "set", "cudawatch_duckdb", str(pool_slots), "cudawatch DuckDB writers"])
        self._spawn("api-server", airflow + ["api-server", "--host", "127.0.0.1", "--port", str(self.api_port), "--workers", "1"])
        self._spawn("dag-processor", airflow + ["dag-processor"])
        self._spawn("scheduler", airflow + ["scheduler"])
        for name in ("w1", "w2"):
            self._spawn(f"worker-{name}", airflow + ["celery", "worker", "--celery-hostname", f"{name}@cudawatch",
                                                     "--concurrency", "1", "--skip-serve-logs"])

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.work / f"{name}.log"
        return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""

    def worker_stats(self) -> dict[str, int]:
        """Tasks each Celery worker has executed (Celery's remote control over the broker)."""
        from celery import Celery

        app = Celery(broker=self.broker)
        stats = app.control.inspect(timeout=5).stats() or {}
        return {name: sum(s.get("total", {}).values()) for name, s in stats.items()}

    def stop(self) -> None:
        """Stop every process this stack started, workers first, by PID (its process group)."""
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                try:  # PostgreSQL: SIGINT is its "fast" shutdown (SIGTERM waits for clients)
                    os.killpg(proc.pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        shutil.rmtree(self.pg_root, ignore_errors=True)
