"""Shards and report archives on S3-compatible storage: a real S3 server (moto in server mode) on
loopback, started and stopped by the test by PID; pyarrow's S3FileSystem talks HTTP to it."""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("moto")

from analytics import store  # noqa: E402
from analytics.store import Store  # noqa: E402
from app.hour import run_hour  # noqa: E402
from cudawatch import objectstore  # noqa: E402
from simulator import simulate_fleet  # noqa: E402

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start")
                time.sleep(0.2)
        env = {"CUDAWATCH_S3_ENDPOINT": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        from pyarrow import fs

        s3 = fs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                             allow_bucket_creation=True)
        s3.create_dir("fleet")
        yield port
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_a_day_of_shards_on_s3_lists_mirrors_and_ingests_like_local(s3_server, tmp_path):
    local = tmp_path / "local"
    simulate_fleet(local, gpus=2, hours=24, seed=5, start=START, injections=[])
    late = sorted((local / "kernels" / "date=2026-11-01" / "hour=05").glob("*.parquet"))
    held = tmp_path / "held"
    held.mkdir()
    for p in late:  # these arrive late
        p.rename(held / p.name)
    (local / "device" / "date=2026-11-01" / "hour=07" / "gpu-node-000-0-badbadbadbad.parquet").write_bytes(b"not parquet")
    uploaded = objectstore.upload_tree(local, "s3://fleet/shards")
    assert "ground_truth.json" in uploaded

    day = objectstore.list_day("s3://fleet/shards", START.date())
    assert {t for t, _ in day} == {"kernels", "memcpy", "device", "health"}
    assert len({h for _, h in day}) == 24 and ("kernels", START + dt.timedelta(hours=5)) not in day
    assert len(day[("device", START + dt.timedelta(hours=7))]) == 2  # one host's shard + the bad one

    part = {"name": "a", "shards": "s3://fleet/shards", "cache": str(tmp_path / "cache")}
    # the hourly sensor sees who sent shards from the object names
    from app.arrival import arrival

    seen = arrival(part, START + dt.timedelta(hours=5), 1)
    assert ("gpu-node-000", "device") in {tuple(x) for x in seen["present"]}
    assert [m[:2] for m in seen["missing"]] == [["gpu-node-000", "kernels"]]
    st = Store(tmp_path / "w.duckdb")
    for h in range(8):
        run_hour(st, START + dt.timedelta(hours=h), part, stages=("ingest",))
    # the late shards land on S3 after their hour ran; the next hour's run picks them up
    for p in late:
        (local / "kernels" / "date=2026-11-01" / "hour=05" / p.name).write_bytes((held / p.name).read_bytes())
    objectstore.upload_tree(local / "kernels" / "date=2026-11-01" / "hour=05", "s3://fleet/shards/kernels/date=2026-11-01/hour=05")
    result = run_hour(st, START + dt.timedelta(hours=8), part, stages=("ingest",))
    assert result.late_loaded == len(late)

    with st.reader() as con:
        quarantined = con.execute("SELECT path FROM quarantine").fetchall()
        counts = {t: con.execute(f"SELECT count(*) FROM {t} WHERE window_start < ?" if t != "device" else
                                 f"SELECT count(*) FROM {t} WHERE ts < ?", [START + dt.timedelta(hours=9)]).fetchone()[0]
                  for t in ("kernels", "device")}
    assert quarantined == [("device/date=2026-11-01/hour=07/gpu-node-000-0-badbadbadbad.parquet",)]
    # the same shards ingested from disk give the same rows
    con = store.connect(tmp_path / "ref.duckdb")
    for h in range(9):
        store.ingest_shards(local, con, hour=START + dt.timedelta(hours=h))
    ref = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("kernels", "device")}
    con.close()
    assert counts == ref and ref["kernels"] > 0


def test_report_archive_upload_and_bad_uris(s3_server, tmp_path):
    folder = tmp_path / "2026-11-01"
    (folder / "mail").mkdir(parents=True)
    (folder / "report.html").write_text("<html>r</html>")
    (folder / "mail" / "subject.txt").write_text("s")
    (folder / "mail" / ".tmp-half").write_text("x")
    assert objectstore.upload_tree(folder, "s3://fleet/reports/2026-11-01") == ["mail/subject.txt", "report.html"]
    assert objectstore.list_objects("s3://fleet/reports") == {"2026-11-01/mail/subject.txt": 1, "2026-11-01/report.html": 14}
    with pytest.raises(ValueError, match="not an s3://bucket/prefix"):
        objectstore.filesystem("http://fleet/x")
    with pytest.raises(ValueError, match="CUDAWATCH_S3_ENDPOINT"):
        objectstore.filesystem("s3://fleet", {"CUDAWATCH_S3_ENDPOINT": "127.0.0.1:9"})
