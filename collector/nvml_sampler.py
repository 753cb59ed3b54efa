"""NVML (and, on Hopper and newer, GPM) sampling of every GPU on the node: one ``device`` row per GPU.

GPM (GPU Performance Monitoring, ``nvmlGpmSampleGet`` + ``nvmlGpmMetricsGet``) reports utilization
between two samples: SM activity, SM occupancy, tensor activity, DRAM bandwidth utilization and PCIe
traffic. Where GPM is missing, ``sm_util_pct`` falls back to NVML's coarse "GPU busy" utilization
and the other GPM columns stay null. Every field is read independently: a counter a GPU lacks
leaves a null, never a failed sample. Calls that fail for another reason than "not supported"
(GPM setup, XID event registration and reads, cleanup) are counted in ``errors`` by operation; the
agent exports them as ``cudawatch_agent_nvml_errors_total{op}``.
"""

from __future__ import annotations

import collections
import datetime as dt
import socket
from dataclasses import dataclass, field

import pynvml as nv

#: clocks event reasons that mean "slowed by power or heat" (nvml.h, nvmlClocksEventReason*).
THROTTLE_MASK = (
    0x4  # SW power cap
    | 0x8  # HW slowdown
    | 0x20  # SW thermal slowdown
    | 0x40  # HW thermal slowdown
    | 0x80  # HW power brake slowdown
)

_GPM = {
    "sm_util_pct": nv.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy_pct": nv.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_util_pct": nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_bw_util_pct": nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "pcie_tx_bytes_s": nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx_bytes_s": nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
}
_MIB = 1 << 20


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass
class Gpu:
    index: int
    handle: object
    uuid: str
    model: str
    gpm: bool = False
    gpm_prev: object = None
    gpm_cur: object = None
    xid_events: int = 0
    extra: dict = field(default_factory=dict)


class NvmlSampler:
    """Opens NVML once and samples all GPUs; ``close()`` releases NVML."""

    def __init__(self, host: str | None = None) -> None:
        nv.nvmlInit()
        self.host = host or socket.gethostname()
        self.errors: collections.Counter[str] = collections.Counter()  # failed NVML calls by operation
        self.driver = _s(nv.nvmlSystemGetDriverVersion())
        self.gpus: list[Gpu] = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            g = Gpu(i, h, _s(nv.nvmlDeviceGetUUID(h)), _s(nv.nvmlDeviceGetName(h)))
            try:
                g.gpm = bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
                if g.gpm:
                    g.gpm_prev, g.gpm_cur = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
                    nv.nvmlGpmSampleGet(h, g.gpm_prev)
            except nv.NVMLError as exc:
                g.gpm = False
                self._failed("gpm_setup", exc)
            self.gpus.append(g)
        self._events = None
        try:
            self._events = nv.nvmlEventSetCreate()
            for g in self.gpus:
                try:
                    nv.nvmlDeviceRegisterEvents(g.handle, nv.nvmlEventTypeXidCriticalError, self._events)
                except nv.NVMLError as exc:
                    self._failed("xid_register", exc)
        except nv.NVMLError as exc:
            self._events = None
            self._failed("xid_event_set", exc)

    def _failed(self, op: str, exc: Exception) -> None:
        """Count a failed NVML call; "not supported" is a GPU without the feature, not a failure."""
        if not isinstance(exc, nv.NVMLError_NotSupported):
            self.errors[op] += 1

    def sample(self) -> list[dict]:
        """One row per GPU in the ``device`` table's columns, plus ``ecc_*`` and ``xid_total`` extras."""
        ts = dt.datetime.now(dt.timezone.utc)
        self._drain_xid()
        rows = []
        for g in self.gpus:
            h = g.handle
            row = {"ts": ts, "host": self.host, "gpu_uuid": g.uuid, "gpu_index": g.index, "gpu_model": g.model}
            row.update(self._gpm(g) if g.gpm else {})
            if row.get("sm_util_pct") is None:
                row["sm_util_pct"] = _try(lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu))
            if row.get("pcie_tx_bytes_s") is None:
                row["pcie_tx_bytes_s"] = _try(lambda: 1024.0 * nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))
                row["pcie_rx_bytes_s"] = _try(lambda: 1024.0 * nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
            row["power_w"] = _try(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            row["temp_c"] = _try(lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
            row["sm_clock_mhz"] = _try(lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
            row["mem_clock_mhz"] = _try(lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)))
            row["clocks_event_reasons"] = _try(lambda: int(nv.nvmlDeviceGetCurrentClocksEventReasons(h)))
            row["mem_used_bytes"] = _try(lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used))
            row["ecc_corrected"] = _try(lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)))
            row["ecc_uncorrected"] = _try(lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)))
            row["xid_total"] = g.xid_events
            rows.append(row)
        return rows

    def _gpm(self, g: Gpu) -> dict:
        try:
            nv.nvmlGpmSampleGet(g.handle, g.gpm_cur)
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(_GPM)
            req.sample1, req.sample2 = g.gpm_prev, g.gpm_cur
            for i, metric in enumerate(_GPM.values()):
                req.metrics[i].metricId = metric
            nv.nvmlGpmMetricsGet(req)
        except nv.NVMLError as exc:
            self._failed("gpm_sample", exc)
            return {}
        finally:
            g.gpm_prev, g.gpm_cur = g.gpm_cur, g.gpm_prev
        out = {}
        for i, name in enumerate(_GPM):
            m = req.metrics[i]
            if m.nvmlReturn != nv.NVML_SUCCESS:
                out[name] = None
            elif name.startswith("pcie"):
                out[name] = float(m.value) * _MIB  # GPM reports MiB/s
            else:
                out[name] = float(m.value)
        return out

    def _drain_xid(self) -> None:
        if self._events is None:
            return
        while True:
            try:
                ev = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError as exc:  # NVML_ERROR_TIMEOUT: no event waiting, the normal way out
                if not isinstance(exc, nv.NVMLError_Timeout):
                    self._failed("xid_read", exc)
                return
            try:
                uuid = _s(nv.nvmlDeviceGetUUID(ev.device))
            except nv.NVMLError as exc:
                self._failed("xid_device", exc)
                continue
            for g in self.gpus:
                if g.uuid == uuid:
                    g.xid_events += 1

    def close(self) -> None:
        for g in self.gpus:
            for s in (g.gpm_prev, g.gpm_cur):
                if s is not None:
                    try:
                        nv.nvmlGpmSampleFree(s)
                    except nv.NVMLError as exc:
                        self._failed("gpm_free", exc)
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as exc:
            self._failed("shutdown", exc)


def _try(fn):
    try:
        return fn()
    except (nv.NVMLError, AttributeError):
        return None
