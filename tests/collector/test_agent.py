"""The node agent: /metrics on a loopback port, gauges from a real H200 sample, device shards."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from collector.agent import Agent
from cudawatch.shards import list_shards, read_shard

from .conftest import REPO, SHARDS


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _status_metrics(root) -> str:
    """One scrape of an agent that serves only the collector status files under ``root`` (no NVML)."""
    agent = Agent(root, 1.0, sampler=None)
    port = agent.serve(0, "127.0.0.1")
    try:
        return _scrape(port)
    finally:
        agent.close()


def _value(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


class _RecordedSampler:
    """Stands in for the GPU only: returns rows NVML produced on the H200 (tests/data/cupti/shards/device)."""

    def __init__(self):
        self.rows = read_shard(list_shards(SHARDS, "device")[0]).to_pylist()
        self.i = 0

    def sample(self):
        row = dict(self.rows[self.i % len(self.rows)])
        self.i += 1
        return [row]


def test_without_nvml_serves_its_own_health(tmp_path):
    agent = Agent(tmp_path, 0.05, sampler=None)
    port = agent.serve(0, "127.0.0.1")
    try:
        agent.run(duration_s=0.2)
        text = _scrape(port)
        assert _value(text, "cudawatch_agent_nvml_available") == 0
        assert _value(text, "cudawatch_agent_up") == 0  # the loop ended
        assert _value(text, "cudawatch_agent_samples_total") == 0
        assert "cuda_sm_utilization{" not in text
    finally:
        agent.close()


def test_gauges_from_a_real_h200_sample_and_device_shard(tmp_path):
    sampler = _RecordedSampler()
    agent = Agent(tmp_path, 0.02, job="train-7", sampler=sampler)
    port = agent.serve(0, "127.0.0.1")
    try:
        agent.run(duration_s=0.15)
        text = _scrape(port)
        row = sampler.rows[(sampler.i - 1) % len(sampler.rows)]
        labels = {"gpu": str(row["gpu_index"]), "uuid": row["gpu_uuid"], "job": "train-7"}
        sm = _value(text, "cuda_sm_utilization", **labels)
        bw = _value(text, "cuda_memory_bandwidth", **labels)
        assert 0 <= sm <= 1 and 0 <= bw <= 1
        assert sm == pytest.approx(row["sm_util_pct"] / 100)
        assert _value(text, "cuda_power_watts", **labels) == pytest.approx(row["power_w"])
        assert _value(text, "cuda_sm_clock_hertz", **labels) == pytest.approx(row["sm_clock_mhz"] * 1e6)
        assert _value(text, "cudawatch_agent_samples_total") == sampler.i
        assert _value(text, "cudawatch_agent_shards_written_total") == 1  # flushed when the loop ended
    finally:
        agent.close()
    (shard,) = list_shards(tmp_path, "device")
    data = read_shard(shard)
    assert data.num_rows == sampler.i
    assert "ecc_uncorrected" in data.column_names


def test_throttle_flag_follows_clock_event_reasons(tmp_path):
    agent = Agent(None, 1.0, sampler=None)
    base = {"gpu_index": 0, "gpu_uuid": "GPU-x", "host": "h"}
    agent.update_gauges([dict(base, clocks_event_reasons=0x1)])  # idle only
    assert agent.throttled.labels("0", "GPU-x", "h", "")._value.get() == 0
    agent.update_gauges([dict(base, clocks_event_reasons=0x4)])  # SW power cap (seen on the H200 under load)
    assert agent.throttled.labels("0", "GPU-x", "h", "")._value.get() == 1


def test_collector_status_files_are_exported(tmp_path):
    status = tmp_path / ".status"
    status.mkdir()
    (status / "h-1.json").write_text(json.dumps({"host": "h", "pid": 1, "job": "j", "ts": time.time(), "duty": 0.25,
                                                 "overhead_pct": 1.5, "budget_pct": 2.0, "dropped_records": 3}))
    (status / "h-2.json").write_text(json.dumps({"host": "h", "pid": 2, "job": "old", "ts": time.time() - 86400, "overhead_pct": 9}))
    text = _status_metrics(tmp_path)
    assert _value(text, "cudawatch_collector_overhead_pct", job="j") == 1.5
    assert _value(text, "cudawatch_collector_sampling_duty", job="j") == 0.25
    assert _value(text, "cudawatch_collector_dropped_records", job="j") == 3
    assert 'job="old"' not in text  # stale processes are dropped
    # a status file from before the held-buffer count (no such key) exports no sample for it, and nothing fails
    assert "\ncudawatch_collector_cupti_host_buffers_held_max{" not in text
    assert "\ncudawatch_collector_cupti_finalizes_total{" not in text  # nor for the cycle count


def test_collector_data_quality_is_exported_and_an_all_invalid_window_reads_error(tmp_path):
    """A window whose real H200 records all lack timestamps: /metrics must say so (invalid by
    reason, window quality error), never look like an idle GPU."""
    import gzip

    from collector.aggregate import Aggregator
    from collector.rows import quality_of
    from .conftest import ZERO_TS_RECORDS

    rows = [json.loads(line)["rec"] for line in gzip.open(ZERO_TS_RECORDS, "rt")]
    bad = [tuple(r) for r in rows if r[0] == 0]
    agg = Aggregator(60)
    agg.add_kernel_rows(bad, delivered_at_s=time.time())
    (w,) = agg.take_all()
    status = tmp_path / ".status"
    status.mkdir()
    (status / "h-7.json").write_text(json.dumps({
        "host": "h", "pid": 7, "job": "j", "ts": time.time(), "records_delivered_total": agg.delivered_total,
        "records_valid_total": agg.valid_total, "records_invalid_total": {"zero_timestamp": agg.invalid_zero_ts, "end_before_start": 0},
        "dropped_records_total": 0, "collector_errors_total": 0, "window_quality": quality_of(w),
        "cupti_host_buffers_held_max": 7, "cupti_finalizes_total": 31}))
    text = _status_metrics(tmp_path)
    assert _value(text, "cudawatch_collector_records_delivered_total", job="j") == len(bad) == 1500
    assert _value(text, "cudawatch_collector_records_valid_total", job="j") == 0
    assert _value(text, "cudawatch_collector_records_invalid_total", job="j", reason="zero_timestamp") == 1500
    assert _value(text, "cudawatch_collector_window_quality", job="j", quality="error") == 1
    assert _value(text, "cudawatch_collector_window_quality", job="j", quality="idle") == 0
    assert _value(text, "cudawatch_collector_cupti_host_buffers_held_max", job="j") == 7  # §23's CNN: 7 at once
    assert _value(text, "cudawatch_collector_cupti_finalizes_total", job="j") == 31  # §23's soak: 31 on-phases


def test_agent_cli_serves_metrics_on_a_loopback_port(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "cudawatch", "agent", "--port", str(port), "--addr", "127.0.0.1",
                             "--interval", "100ms", "--duration", "20s", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.time() + 20
        while True:
            try:
                text = _scrape(port)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        assert re.search(r"^cudawatch_agent_up 1\.0$", text, re.M)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_metric_names_match_a_real_h200_scrape():
    """The names served above are the ones the agent served on the H200 (tests/data/cupti/metrics_h200.txt)."""
    text = (SHARDS.parent / "metrics_h200.txt").read_text()
    for name in ("cuda_sm_utilization", "cuda_memory_bandwidth", "cuda_sm_occupancy", "cuda_tensor_utilization",
                 "cuda_pcie_tx_bytes_per_second", "cuda_gpu_throttled", "cudawatch_agent_up"):
        assert re.search(rf"^{name}[{{ ]", text, re.M), name
    assert 0 <= _value(text, "cuda_sm_utilization") <= 1


def test_failed_nvml_calls_are_counted_and_exported(tmp_path, monkeypatch):
    """A GPU without GPM is not a failure; an XID registration NVML refuses is, and /metrics shows it."""
    import pynvml as nv

    from collector import nvml_sampler

    def refuse(code):
        def f(*a, **k):
            raise nv.NVMLError(code)
        return f

    for name, fn in {"nvmlInit": lambda: None, "nvmlSystemGetDriverVersion": lambda: "580.0",
                     "nvmlDeviceGetCount": lambda: 2, "nvmlDeviceGetHandleByIndex": lambda i: i,
                     "nvmlDeviceGetUUID": lambda h: f"GPU-{h}", "nvmlDeviceGetName": lambda h: "NVIDIA H200",
                     "nvmlGpmQueryDeviceSupport": refuse(nv.NVML_ERROR_NOT_SUPPORTED),
                     "nvmlEventSetCreate": lambda: object(),
                     "nvmlDeviceRegisterEvents": refuse(nv.NVML_ERROR_UNKNOWN),
                     "nvmlEventSetWait_v2": refuse(nv.NVML_ERROR_TIMEOUT)}.items():
        monkeypatch.setattr(nv, name, fn)
    sampler = nvml_sampler.NvmlSampler("node-1")
    assert dict(sampler.errors) == {"xid_register": 2}  # GPM "not supported" is not counted
    sampler._drain_xid()  # a timeout is "no event waiting": not an error
    assert dict(sampler.errors) == {"xid_register": 2}
    agent = Agent(tmp_path, 1.0, sampler=sampler)
    port = agent.serve(0, "127.0.0.1")
    try:
        assert _value(_scrape(port), "cudawatch_agent_nvml_errors_total", op="xid_register") == 2
    finally:
        agent.close()


def test_a_collected_programs_cupti_cycles_reach_metrics_as_its_duty_log_counts_them(tmp_path):
    """Through the CLI a user runs (``cudawatch collect`` on a replayed H200 capture, 2-s windows so
    the period is 2 s), the status file's cycle count reaches /metrics and agrees with the on-phases
    the duty log kept: one cuptiFinalize per pause, plus the stop's when it came inside an on-phase."""
    out, duty = tmp_path / "shards", tmp_path / "duty.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    env.update(PYTHONPATH=str(REPO), CUDAWATCH_WINDOW_S="2", CUDAWATCH_DUTY_LOG=str(duty),
               CUDAWATCH_REPLAY=str(REPO / "tests" / "data" / "cupti" / "records.jsonl.gz"))
    p = subprocess.run([sys.executable, "-m", "cudawatch", "collect", "--job", "cycles", "--out", str(out), "--",
                        sys.executable, "-c", "import time; time.sleep(7)"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    [status] = [json.loads(f.read_text()) for f in (out / ".status").glob("*.json")]
    pauses = len(json.loads(duty.read_text())["rows"])
    assert pauses >= 2 and pauses <= status["cupti_finalizes_total"] <= pauses + 1, (pauses, status)
    text = _status_metrics(out)
    assert _value(text, "cudawatch_collector_cupti_finalizes_total", job="cycles") == status["cupti_finalizes_total"]


def test_a_status_file_with_a_wrong_typed_value_is_counted_unreadable_and_the_others_still_export(tmp_path):
    """Valid JSON but not a collector's status (a value that is not a number, a list): before, one such
    file made every scrape fail with HTTP 500, so no collector's metrics reached Prometheus."""
    status = tmp_path / ".status"
    status.mkdir()
    (status / "h-1.json").write_text(json.dumps({"host": "h", "pid": 1, "job": "good", "ts": time.time(), "overhead_pct": 1.5,
                                                 "cupti_finalizes_total": 3}))
    (status / "h-2.json").write_text(json.dumps({"host": "h", "pid": 2, "job": "bad", "ts": time.time(), "overhead_pct": 0.5,
                                                 "cupti_finalizes_total": "many"}))
    (status / "h-3.json").write_text(json.dumps([1, 2, 3]))
    text = _status_metrics(tmp_path)
    assert _value(text, "cudawatch_collector_overhead_pct", job="good") == 1.5
    assert _value(text, "cudawatch_collector_cupti_finalizes_total", job="good") == 3
    assert 'job="bad"' not in text  # none of the bad file's samples, not even its good ones
    assert _value(text, "cudawatch_agent_status_files_unreadable") == 2
