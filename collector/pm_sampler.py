"""Optional CUPTI PM sampling for the agent: SM and DRAM throughput from hardware counters.

Uses ``cupti.pm_sampling.Collector`` (cupti-python >= 13.4) with a single-pass metric set
(``TriageCompute`` by default) sampled on a GPU time interval. PM sampling reads the chip's
performance monitors for the whole device, so it sees every process's work; it needs a CUDA
context in the agent process (retained primary context, created through the driver API) and, where
``RmProfilingAdminOnly=1``, root or CAP_SYS_ADMIN. Values are the mean over the samples decoded
since the previous read, in percent of peak.
"""

from __future__ import annotations

import ctypes

from cupti import pm_sampling

#: (metric names, single-pass set) tried in order until PM sampling accepts one; values in % of peak
CANDIDATES = (
    (("sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"), None),
    (("sm__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"), None),
    (("TriageCompute.sm__throughput", "FBSP.TriageCompute.dramc__throughput"), "TriageCompute"),
)
KEYS = ("sm_throughput_pct", "dram_throughput_pct")


def _primary_context(device_index: int) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(0), ctypes.c_void_p(0)
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), device_index)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)), ("cuCtxSetCurrent", (ctx,))):
        rc = getattr(cuda, call)(*args)
        if rc != 0:
            raise RuntimeError(f"{call} failed with CUDA error {rc}")


class PmSampler:
    """PM sampling on one device; ``read()`` returns ``{key: percent}`` averaged since the last read."""

    def __init__(self, device_index: int = 0, interval_ns: int = 10_000_000) -> None:
        _primary_context(device_index)
        self.keys = KEYS
        errors = []
        for metrics, metric_set in CANDIDATES:
            collector = pm_sampling.Collector(device_index=device_index)
            collector.enable()
            try:
                collector.configure(metrics=list(metrics), hardware_buffer_size=64 << 20, sampling_interval=interval_ns,
                                    trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL,
                                    single_pass_metric_set_name=metric_set)
                collector.start()
            except Exception as exc:
                errors.append(f"{metrics}: {exc}")
                collector.disable()
                continue
            self.collector, self.metrics = collector, metrics
            self.chip = getattr(collector, "_chip_name", None)
            return
        raise RuntimeError("PM sampling accepted no metric set: " + "; ".join(errors))

    def read(self) -> dict[str, float]:
        data = self.collector.decode()
        n = data.num_completed_samples
        if n == 0:
            return {}
        sums = [0.0] * len(self.keys)
        for i in range(n):
            for j, v in enumerate(data[i].metric_values):
                sums[j] += float(v)
        return {k: s / n for k, s in zip(self.keys, sums)}

    def close(self) -> None:
        try:
            self.collector.stop()
        finally:
            self.collector.disable()
