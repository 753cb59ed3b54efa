"""Windows -> spool -> hourly shards, rotation, recovery after a crash, and the recorded H200 shards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pyarrow.compute as pc

from collector.aggregate import Aggregator
from collector.rows import DeviceInfo, ProcessMeta
from collector.spool import SPOOL_DIR, Spool, recover
from cudawatch.shards import kernel_id_of, list_shards, read_shard

from .conftest import REPO, SHARDS

HOUR = 1_796_220_000 // 3600 * 3600  # an hour boundary in UNIX seconds


def _meta(pid=4242, alive_from=HOUR - 7200.0):
    return ProcessMeta(host="gpu-host-1", job="train", run_id="run1", pid=pid, cupti_version="test",
                       devices={0: DeviceInfo("GPU-abc", 3, "NVIDIA H200")}, alive_from_s=alive_from)


def _aggregated(records, first_s):
    """Real records shifted so the first kernel starts at UNIX time ``first_s``."""
    kernels, copies = records
    t0 = kernels[0][0]
    agg = Aggregator(window_s=60, clock_offset_ns=int(first_s * 10**9) - t0)
    agg.add_kernels(kernels)
    agg.add_copies([c for c in copies if c[0] >= t0])
    return agg


def test_rows_follow_the_contract(tmp_path, records):
    agg = _aggregated(records, HOUR - 0.5)  # the 1.3 s of kernels straddle an hour boundary
    agg.add_traced_time(HOUR - 30, HOUR + 30)
    spool = Spool(tmp_path, _meta(), 60)
    assert spool.add_windows(agg.take_all()) >= 4
    written = spool.rotate(final=True)
    spool.close()
    assert not (tmp_path / SPOOL_DIR).exists() or not any((tmp_path / SPOOL_DIR).rglob("*.parquet"))
    kernels = [read_shard(p) for p in list_shards(tmp_path, "kernels")]
    assert len(kernels) == 2  # one shard per hour
    rows = [r for t in kernels for r in t.to_pylist()]
    mangled = {sig[0] for _, _, sig in records[0]}
    assert {r["kernel_id"] for r in rows} <= {kernel_id_of(m) for m in mangled}
    assert sum(r["launches"] for r in rows) == len(records[0])
    r = max(rows, key=lambda r: r["launches"])
    assert r["gpu_uuid"] == "GPU-abc" and r["gpu_index"] == 3 and r["gpu_model"] == "NVIDIA H200"
    assert r["kernel"].startswith("void at::native::")  # demangled
    assert r["hist_bucket"] == sorted(r["hist_bucket"]) and sum(r["hist_count"]) == r["launches"]
    assert 0 < r["sampling_duty"] <= 1
    assert {p.parent.name for p in written if "kernels" in p.parts} == {f"hour={(HOUR - 3600) // 3600 % 24:02d}", f"hour={HOUR // 3600 % 24:02d}"}


def test_rotation_writes_only_finished_hours(tmp_path, records):
    agg = _aggregated(records, HOUR - 0.5)
    spool = Spool(tmp_path, _meta(), 60)
    spool.add_windows(agg.take_all())
    first = spool.rotate(now_s=HOUR + 10)  # the current hour stays spooled
    assert first and all(f"hour={(HOUR - 3600) // 3600 % 24:02d}" in str(p) for p in first)
    assert any(spool.dir.glob("kernels-*.parquet"))
    second = spool.rotate(final=True)
    assert second and all(f"hour={HOUR // 3600 % 24:02d}" in str(p) for p in second)


def test_recover_turns_a_dead_process_spool_into_shards(tmp_path, records):
    dead_pid = _dead_pid()
    agg = _aggregated(records, HOUR - 0.5)
    meta = _meta(pid=dead_pid)
    meta.host = socket.gethostname()
    spool = Spool(tmp_path, meta, 60)
    spool.add_windows(agg.take_all())
    assert not list_shards(tmp_path)
    got = recover(tmp_path)
    assert {p.parts[-4] for p in got} >= {"kernels", "memcpy", "health"}
    assert not (tmp_path / SPOOL_DIR / spool.dir.name).exists()
    assert recover(tmp_path) == []  # idempotent


def test_recover_leaves_live_processes_alone(tmp_path, records):
    agg = _aggregated(records, HOUR)
    meta = _meta(pid=os.getpid())
    meta.host = socket.gethostname()
    Spool(tmp_path, meta, 60).add_windows(agg.take_all())
    assert recover(tmp_path) == []


def test_crash_loses_at_most_the_open_window(tmp_path, records):
    """A real process spools closed windows, then dies by SIGKILL; recover() finds every closed window."""
    script = textwrap.dedent(f"""
        import os, signal
        from collector.aggregate import Aggregator
        from collector.replay import load_records
        from collector.rows import ProcessMeta
        from collector.spool import Spool
        kernels, _ = load_records({str(SHARDS.parent / 'records.jsonl.gz')!r})
        agg = Aggregator(window_s=1, clock_offset_ns={HOUR * 10**9} - kernels[0][0])
        agg.add_kernels(kernels)
        import socket
        spool = Spool({str(tmp_path)!r}, ProcessMeta(socket.gethostname(), 'j', 'r', os.getpid(), alive_from_s={HOUR}.0), 1)
        last = max(k[0] for k in kernels) - kernels[0][0]
        spool.add_windows(agg.take_closed({HOUR} + last // 10**9, grace_s=0))
        print(agg.open_windows(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=_env())
    assert p.returncode == -9, p.stderr
    open_windows = int(p.stdout.strip())
    assert open_windows >= 1
    recover(tmp_path)
    rows = [r for f in list_shards(tmp_path, "kernels") for r in read_shard(f).to_pylist()]
    kernels = records[0]
    lost = len(kernels) - sum(r["launches"] for r in rows)
    last_window = max(k[0] for k in kernels) - kernels[0][0]
    in_open = sum(1 for k in kernels if (k[0] - kernels[0][0]) // 10**9 >= last_window // 10**9)
    assert lost == in_open  # exactly the records of the window that was still open


def test_recorded_h200_shards_are_valid_and_consistent(records):
    """Shards written by `cudawatch collect` on the H200 agree with the records of the same run."""
    kernels = read_shard(list_shards(SHARDS, "kernels")[0])
    memcpy = read_shard(list_shards(SHARDS, "memcpy")[0])
    health = read_shard(list_shards(SHARDS, "health")[0])
    device = read_shard(list_shards(SHARDS, "device")[0])
    assert kernels.num_rows > 50 and memcpy.num_rows > 0 and health.num_rows > 0 and device.num_rows > 0
    assert set(pc.unique(kernels.column("gpu_model")).to_pylist()) == {"NVIDIA H200"}
    assert set(pc.unique(kernels.column("job")).to_pylist()) == {"tinytrain"}
    # every recorded signature shows up in the shard with at least as many launches as recorded
    # (the dump holds the first 4000 records; the shard holds the traced part of the whole run)
    by_sig = {}
    for r in kernels.to_pylist():
        key = (r["kernel_id"], r["grid_x"], r["grid_y"], r["grid_z"], r["block_x"], r["block_y"], r["block_z"], r["registers_per_thread"], r["shared_mem_bytes"])
        by_sig[key] = by_sig.get(key, 0) + r["launches"]
    recorded = {}
    for _, _, sig in records[0]:
        key = (kernel_id_of(sig[0]),) + tuple(sig[1:9])
        recorded[key] = recorded.get(key, 0) + 1
    for key, n in recorded.items():
        assert by_sig.get(key, 0) >= n, key
    duty = health.column("sampling_duty").to_pylist()
    assert all(0 <= d <= 1 for d in duty) and max(duty) > 0
    assert sum(health.column("dropped_records").to_pylist()) == 0
    d = device.to_pylist()[0]
    assert d["gpu_model"] == "NVIDIA H200" and 0 <= d["sm_util_pct"] <= 100 and d["power_w"] > 0


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x])
    return env


def test_the_hourly_combine_starts_no_arrow_thread_pool_inside_the_program(tmp_path):
    """The spool combines an hour's window files inside the traced program. Read with Arrow's CPU
    thread pool, that started one thread per core, and on a 16-core GPU host the first hour's
    shards stepped the program's RSS by tens of MiB (docs/benchmarks.md §23; benchmarks/spool_rss.py
    at 16 threads: +60 MiB against +25 single-threaded). A fresh process with an 8-thread pool:"""
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from collector.aggregate import Aggregator
        from collector.replay import load_records
        from collector.rows import ProcessMeta
        from collector.spool import Spool
        kernels, _ = load_records({str(REPO / "tests" / "data" / "cupti" / "records.jsonl.gz")!r})
        epoch, t0 = 1_699_999_200, min(k[0] for k in kernels)
        spool = Spool({str(tmp_path)!r}, ProcessMeta(host="h", job="j", run_id="r", pid=1), window_s=60)
        agg = Aggregator(window_s=60)
        for i in range(2):
            shift = (epoch + i * 60) * 1_000_000_000 - t0
            agg.add_kernels([(s + shift, e + shift, sig) for s, e, sig in kernels[:500]])
        before = len(os.listdir("/proc/self/task"))
        spool.close_and_rotate(agg, epoch + 3600 + 200, 30)
        print(spool.shards_total, len(os.listdir("/proc/self/task")) - before)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMP_NUM_THREADS="8"))
    assert p.returncode == 0, p.stderr
    shards, new_threads = map(int, p.stdout.split())
    assert shards >= 2 and new_threads < 4  # with the pool's 8 threads it read 9
