"""``cudawatch agent``: per-node sampler (NVML/GPM) -> ``device`` shards + Prometheus ``/metrics``.

Metric names (labels ``gpu``, ``uuid``, ``host``, and ``job`` where the node has one):
``cuda_sm_utilization`` and ``cuda_memory_bandwidth`` (0..1, the design's two headline gauges),
``cuda_sm_occupancy``, ``cuda_tensor_utilization`` (0..1), ``cuda_pcie_tx_bytes_per_second``,
``cuda_pcie_rx_bytes_per_second``, ``cuda_power_watts``, ``cuda_temperature_celsius``,
``cuda_sm_clock_hertz``, ``cuda_memory_clock_hertz``, ``cuda_clocks_event_reasons`` (bitmask),
``cuda_gpu_throttled`` (1 when power/thermal reasons are active), ``cuda_memory_used_bytes``,
``cuda_ecc_errors{type}``, ``cuda_xid_errors``. The agent's own health is always served, with or
without NVML: ``cudawatch_agent_up``, ``cudawatch_agent_nvml_available``,
``cudawatch_agent_samples_total``, ``cudawatch_agent_sample_errors_total``,
``cudawatch_agent_sample_seconds``, ``cudawatch_agent_last_sample_timestamp_seconds``,
``cudawatch_agent_shards_written_total``, ``cudawatch_agent_last_shard_timestamp_seconds``,
``cudawatch_agent_nvml_errors_total{op}`` (failed GPM, XID-event and cleanup calls); and
per collector process found in ``OUT/.status/``: ``cudawatch_collector_overhead_pct``,
``cudawatch_collector_budget_pct``, ``cudawatch_collector_sampling_duty``,
``cudawatch_collector_dropped_records``, ``cudawatch_collector_last_window_timestamp_seconds``,
``cudawatch_collector_cupti_host_buffers_held_max`` (the most host buffers CUPTI held at once; the
buffer budget assumes ``cudawatch.config.HOST_BUFFERS_HELD``), ``cudawatch_collector_cupti_finalizes_total``
(detach/attach cycles, each keeping ``cudawatch.config.FINALIZE_KEEPS_GPU_MIB`` of GPU memory), and the
data quality of each collector: counters since its start ``cudawatch_collector_records_delivered_total``,
``cudawatch_collector_records_valid_total``, ``cudawatch_collector_records_invalid_total{reason}``
(``zero_timestamp``, ``end_before_start``), ``cudawatch_collector_records_dropped_total``,
``cudawatch_collector_errors_total``, and ``cudawatch_collector_window_quality{quality}`` (1 for the
last closed window's ``data_quality``: ok, degraded, error, idle; alert on ``quality="error"``).

Device rows are buffered and written as a shard every ``flush_s`` (default 600 s), at each hour
change and on exit, so a crash loses at most ``flush_s`` of samples.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from pathlib import Path

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cudawatch.config import FINALIZE_KEEPS_GPU_MIB, HOST_BUFFERS_HELD
from cudawatch.shards import DEVICE, write_shard

_GPU_LABELS = ("gpu", "uuid", "host", "job")


class _CollectorStatus:
    """Exports the status files that in-process collectors write under ``OUT/.status``."""

    def __init__(self, root: Path, stale_s: float = 3600.0) -> None:
        self.root = root / ".status"
        self.stale_s = stale_s

    def collect(self):
        labels = ["host", "pid", "job"]
        fams = {
            "overhead_pct": GaugeMetricFamily("cudawatch_collector_overhead_pct", "Estimated collector overhead in the last window (% of run time).", labels=labels),
            "budget_pct": GaugeMetricFamily("cudawatch_collector_budget_pct", "Collector overhead budget (CUDAWATCH_MAX_OVERHEAD_PCT).", labels=labels),
            "duty": GaugeMetricFamily("cudawatch_collector_sampling_duty", "Fraction of time the collector traces (adaptive duty cycle).", labels=labels),
            "dropped_records": GaugeMetricFamily("cudawatch_collector_dropped_records", "CUPTI records dropped in the last window.", labels=labels),
            "ts": GaugeMetricFamily("cudawatch_collector_last_window_timestamp_seconds", "UNIX time of the collector's last closed window.", labels=labels),
            "cupti_host_buffers_held_max": GaugeMetricFamily(
                "cudawatch_collector_cupti_host_buffers_held_max",
                f"Most CUPTI host buffers held at once since the collector started (its buffer budget assumes {HOST_BUFFERS_HELD}).", labels=labels),
        }
        counters = {
            "records_delivered_total": CounterMetricFamily("cudawatch_collector_records_delivered", "Kernel/memcpy/memset records CUPTI delivered.", labels=labels),
            "records_valid_total": CounterMetricFamily("cudawatch_collector_records_valid", "Delivered records with usable timestamps (aggregated).", labels=labels),
            "dropped_records_total": CounterMetricFamily("cudawatch_collector_records_dropped", "Records CUPTI dropped for lack of buffer space.", labels=labels),
            "collector_errors_total": CounterMetricFamily("cudawatch_collector_errors", "Collector operations that failed (flush, pause, resume, status).", labels=labels),
            "cupti_finalizes_total": CounterMetricFamily(
                "cudawatch_collector_cupti_finalizes",
                f"CUPTI detach/attach cycles (cuptiFinalize) since the collector started; each keeps ~{FINALIZE_KEEPS_GPU_MIB} MiB of GPU memory.", labels=labels),
        }
        invalid = CounterMetricFamily("cudawatch_collector_records_invalid", "Delivered records rejected, by reason.", labels=labels + ["reason"])
        quality = GaugeMetricFamily("cudawatch_collector_window_quality", "1 for the data_quality of the last closed window.", labels=labels + ["quality"])
        now = time.time()
        unreadable = 0
        for f in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:  # every sample of a file is read before any is added: a bad value drops the file, not the scrape
                s = json.loads(f.read_text())
                if now - float(s.get("ts", 0)) > self.stale_s:
                    continue
                samples = self._samples(s, fams, counters, invalid, quality)
            except (OSError, ValueError, TypeError, AttributeError):  # torn, foreign or wrong-typed file:
                unreadable += 1  # counted below, the others still export
                continue
            for fam, lv, value in samples:
                fam.add_metric(lv, value)
        yield from fams.values()
        yield from counters.values()
        yield invalid
        yield quality
        bad = GaugeMetricFamily("cudawatch_agent_status_files_unreadable", "Collector status files that could not be read.")
        bad.add_metric([], float(unreadable))
        yield bad

    @staticmethod
    def _samples(s: dict, fams: dict, counters: dict, invalid, quality) -> list:
        """(family, labels, value) for one status file; raises on a value that is not a number."""
        lv = [str(s.get("host", "")), str(s.get("pid", "")), str(s.get("job", ""))]
        out = [(fam, lv, float(s[key])) for group in (fams, counters) for key, fam in group.items() if s.get(key) is not None]
        out += [(invalid, lv + [str(reason)], float(v)) for reason, v in (s.get("records_invalid_total") or {}).items()]
        if s.get("window_quality"):
            out += [(quality, lv + [q], 1.0 if s["window_quality"] == q else 0.0) for q in ("ok", "degraded", "error", "idle")]
        return out


class _NvmlErrors:
    """``cudawatch_agent_nvml_errors_total{op}``: failed NVML calls outside the per-field reads
    (collector.nvml_sampler counts them by operation)."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def collect(self):
        c = CounterMetricFamily("cudawatch_agent_nvml_errors", "NVML calls that failed (GPM, XID events, cleanup), by operation.", labels=["op"])
        for op, n in sorted(self.sampler.errors.items()):
            c.add_metric([op], n)
        yield c


class Agent:
    """Samples GPUs, keeps Prometheus gauges current and writes ``device`` shards.

    Args:
        out: shard root (None: no shards, metrics only).
        interval_s: seconds between samples.
        job: value of the ``job`` label (``CUDAWATCH_JOB``), empty when the node has none.
        sampler: object with ``sample() -> list[dict]`` (default: NvmlSampler; None when NVML is
            missing, and then only the agent's own health metrics are served).
    """

    def __init__(self, out: str | os.PathLike | None, interval_s: float = 1.0, *, job: str | None = None,
                 host: str | None = None, sampler="auto", flush_s: float = 600.0, pm_device: int | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval must be positive, got {interval_s}")
        self.out = Path(out) if out else None
        self.interval_s = interval_s
        self.flush_s = flush_s
        self.host = host or socket.gethostname()
        self.job = job if job is not None else os.environ.get("CUDAWATCH_JOB", "")
        self.nvml_error: str | None = None
        if sampler == "auto":
            try:
                from collector.nvml_sampler import NvmlSampler

                sampler = NvmlSampler(self.host)
            except Exception as exc:  # ImportError, NVMLError (no driver/library)
                sampler, self.nvml_error = None, f"{type(exc).__name__}: {exc}"
        self.sampler = sampler
        self.registry = CollectorRegistry()
        r = self.registry
        g = lambda name, doc: Gauge(name, doc, _GPU_LABELS, registry=r)  # noqa: E731
        self.gauges = {
            "sm_util_pct": (g("cuda_sm_utilization", "Fraction of SMs busy (GPM SM activity; NVML GPU busy without GPM), 0..1."), 0.01),
            "dram_bw_util_pct": (g("cuda_memory_bandwidth", "DRAM bandwidth utilization, 0..1 (GPM)."), 0.01),
            "sm_occupancy_pct": (g("cuda_sm_occupancy", "Active warps over the theoretical maximum, 0..1 (GPM)."), 0.01),
            "tensor_util_pct": (g("cuda_tensor_utilization", "Fraction of time SMs run tensor instructions, 0..1 (GPM)."), 0.01),
            "pcie_tx_bytes_s": (g("cuda_pcie_tx_bytes_per_second", "PCIe traffic from the GPU."), 1.0),
            "pcie_rx_bytes_s": (g("cuda_pcie_rx_bytes_per_second", "PCIe traffic to the GPU."), 1.0),
            "power_w": (g("cuda_power_watts", "Board power draw."), 1.0),
            "temp_c": (g("cuda_temperature_celsius", "GPU temperature."), 1.0),
            "sm_clock_mhz": (g("cuda_sm_clock_hertz", "SM clock."), 1e6),
            "mem_clock_mhz": (g("cuda_memory_clock_hertz", "Memory clock."), 1e6),
            "clocks_event_reasons": (g("cuda_clocks_event_reasons", "NVML clocks event reasons bitmask."), 1.0),
            "mem_used_bytes": (g("cuda_memory_used_bytes", "Device memory in use."), 1.0),
            "xid_total": (g("cuda_xid_errors", "Critical XID events seen since the agent started."), 1.0),
        }
        self.throttled = Gauge("cuda_gpu_throttled", "1 when clocks are held down by power or thermal limits.", _GPU_LABELS, registry=r)
        self.ecc = Gauge("cuda_ecc_errors", "Volatile ECC error count.", _GPU_LABELS + ("type",), registry=r)
        self.up = Gauge("cudawatch_agent_up", "1 while the agent loop runs.", registry=r)
        self.nvml_ok = Gauge("cudawatch_agent_nvml_available", "1 when NVML could be opened.", registry=r)
        self.samples = Counter("cudawatch_agent_samples", "GPU sampling rounds done.", registry=r)
        self.sample_errors = Counter("cudawatch_agent_sample_errors", "Sampling rounds that failed.", registry=r)
        self.sample_seconds = Gauge("cudawatch_agent_sample_seconds", "Duration of the last sampling round.", registry=r)
        self.last_sample = Gauge("cudawatch_agent_last_sample_timestamp_seconds", "UNIX time of the last sample.", registry=r)
        self.shards = Counter("cudawatch_agent_shards_written", "Device shards written.", registry=r)
        self.last_shard = Gauge("cudawatch_agent_last_shard_timestamp_seconds", "UNIX time of the last shard written.", registry=r)
        self.nvml_ok.set(1 if self.sampler is not None else 0)
        if self.out is not None:
            r.register(_CollectorStatus(self.out))
        if getattr(self.sampler, "errors", None) is not None:
            r.register(_NvmlErrors(self.sampler))
        self.pm = None
        self.pm_error: str | None = None
        self.pm_device = pm_device
        self._init_buffers()

    def start_pm_sampling(self) -> None:
        """Start CUPTI PM sampling on ``pm_device`` (called by ``run`` after the server is up)."""
        pm_device, r = self.pm_device, self.registry
        if pm_device is not None and self.pm is None and self.pm_error is None:
            try:
                from collector.pm_sampler import PmSampler

                self.pm = PmSampler(pm_device)
                self.pm_gauges = {
                    "sm_throughput_pct": Gauge("cuda_pm_sm_throughput", "SM throughput, fraction of peak (CUPTI PM sampling).", _GPU_LABELS, registry=r),
                    "dram_throughput_pct": Gauge("cuda_pm_dram_throughput", "DRAM throughput, fraction of peak (CUPTI PM sampling).", _GPU_LABELS, registry=r),
                }
            except Exception as exc:
                self.pm_error = f"{type(exc).__name__}: {exc}"
                import sys

                print(f"cudawatch agent: PM sampling off ({self.pm_error})", file=sys.stderr, flush=True)

    def _init_buffers(self) -> None:
        self._rows: list[dict] = []
        self._rows_hour: dt.datetime | None = None
        self._last_flush = time.time()
        self._stop = threading.Event()
        self.server = None

    # ---- one round -----------------------------------------------------------------------
    def sample_once(self) -> list[dict]:
        """Sample, update gauges, buffer rows; returns the rows (empty without NVML)."""
        if self.sampler is None:
            return []
        t0 = time.perf_counter()
        try:
            rows = self.sampler.sample()
        except Exception:
            self.sample_errors.inc()
            return []
        self.sample_seconds.set(time.perf_counter() - t0)
        self.samples.inc()
        self.last_sample.set(time.time())
        self.update_gauges(rows)
        if self.pm is not None:
            self._update_pm(rows)
        self._buffer(rows)
        return rows

    def _update_pm(self, rows: list[dict]) -> None:
        try:
            values = self.pm.read()
        except Exception:
            self.sample_errors.inc()
            return
        row = next((r for r in rows if r.get("gpu_index") == self.pm_device), {})
        lv = (str(self.pm_device), str(row.get("gpu_uuid")), self.host, self.job)
        for key, v in values.items():
            self.pm_gauges[key].labels(*lv).set(v / 100.0)

    def update_gauges(self, rows: list[dict]) -> None:
        for row in rows:
            lv = (str(row.get("gpu_index")), str(row.get("gpu_uuid")), str(row.get("host") or self.host), self.job)
            for key, (gauge, scale) in self.gauges.items():
                v = row.get(key)
                if v is not None:
                    gauge.labels(*lv).set(float(v) * scale)
            reasons = row.get("clocks_event_reasons")
            if reasons is not None:
                from collector.nvml_sampler import THROTTLE_MASK

                self.throttled.labels(*lv).set(1 if int(reasons) & THROTTLE_MASK else 0)
            for kind in ("corrected", "uncorrected"):
                v = row.get(f"ecc_{kind}")
                if v is not None:
                    self.ecc.labels(*lv, kind).set(v)

    def _buffer(self, rows: list[dict]) -> None:
        if self.out is None or not rows:
            return
        hour = rows[0]["ts"].replace(minute=0, second=0, microsecond=0)
        if self._rows_hour is not None and hour != self._rows_hour:
            self.flush()
        self._rows_hour = hour
        self._rows.extend(rows)
        if time.time() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> Path | None:
        """Write buffered rows as one ``device`` shard (extra ecc/xid columns are kept)."""
        self._last_flush = time.time()
        if self.out is None or not self._rows:
            return None
        cols = {name: [r.get(name) for r in self._rows] for name in DEVICE.names if name != "schema_version"}
        data = pa.table({k: pa.array(v, type=DEVICE.field(k).type) for k, v in cols.items()})
        for extra in ("ecc_corrected", "ecc_uncorrected", "xid_total"):
            data = data.append_column(extra, pa.array([r.get(extra) for r in self._rows], pa.int64()))
        path = write_shard(self.out, "device", data, self._rows_hour, host=self.host)
        self._rows = []
        self.shards.inc()
        self.last_shard.set(time.time())
        return path

    # ---- serving -------------------------------------------------------------------------
    def serve(self, port: int = 8080, addr: str = "0.0.0.0") -> int:
        """Start the ``/metrics`` HTTP server; returns the bound port (0 picks a free one)."""
        self.server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return self.server.server_address[1]

    def run(self, duration_s: float | None = None) -> None:
        """Sample every ``interval_s`` until ``stop()`` (or ``duration_s``); flushes on the way out."""
        self.up.set(1)
        self.start_pm_sampling()
        end = None if duration_s is None else time.monotonic() + duration_s
        try:
            while not self._stop.is_set() and (end is None or time.monotonic() < end):
                t0 = time.monotonic()
                self.sample_once()
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
        finally:
            self.up.set(0)
            self.flush()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.pm is not None:
            self.pm.close()
        if self.sampler is not None and hasattr(self.sampler, "close"):
            self.sampler.close()
