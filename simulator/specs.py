"""The simulator's vocabulary: launch configurations, kernels, copies, workloads, kernel classes."""

from __future__ import annotations

from dataclasses import dataclass

from cudawatch.shards import kernel_id_of

#: Kernel classes: what the device counters see of them (tensor-core use, DRAM traffic, occupancy).
#: class -> (tensor-core share of busy time, DRAM-bandwidth share, achieved occupancy 0..1)
KERNEL_CLASSES: dict[str, tuple[float, float, float]] = {
    "gemm": (0.80, 0.30, 0.22),
    "attention": (0.70, 0.35, 0.25),
    "conv": (0.75, 0.35, 0.30),
    "elementwise": (0.00, 0.85, 0.85),
    "reduce": (0.00, 0.70, 0.60),
    "norm": (0.00, 0.75, 0.55),
    "softmax": (0.00, 0.65, 0.50),
    "optimizer": (0.00, 0.80, 0.70),
    "copy": (0.00, 0.90, 0.80),
    "sort": (0.00, 0.40, 0.45),
    "nccl": (0.00, 0.25, 0.10),
}

#: Per-class noise: (lognormal sigma of one launch, tail probability, hourly sigma of the mean).
CLASS_NOISE: dict[str, tuple[float, float, float]] = {
    "gemm": (0.04, 0.002, 0.008),
    "attention": (0.06, 0.002, 0.010),
    "conv": (0.05, 0.002, 0.010),
    "elementwise": (0.10, 0.003, 0.010),
    "reduce": (0.12, 0.003, 0.012),
    "norm": (0.08, 0.003, 0.010),
    "softmax": (0.08, 0.003, 0.010),
    "optimizer": (0.06, 0.002, 0.008),
    "copy": (0.12, 0.004, 0.012),
    "sort": (0.10, 0.003, 0.012),
    "nccl": (0.30, 0.010, 0.020),
}


@dataclass(frozen=True)
class LaunchConfig:
    """One launch configuration of a kernel: grid, block, registers, shared memory, and how it runs.

    per_step: launches per step; mean_us: mean per-launch duration in microseconds.
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    smem: int
    per_step: float
    mean_us: float


@dataclass(frozen=True)
class KernelSpec:
    """A kernel of a workload: names, class, and its launch configurations (1 to 4)."""

    name: str
    mangled: str
    klass: str
    configs: tuple[LaunchConfig, ...]

    @property
    def kernel_id(self) -> str:
        return kernel_id_of(self.mangled)


@dataclass(frozen=True)
class CopySpec:
    """A memory copy a step makes: kind, memory kinds, count and size per step, link speed.

    gbps: sustained throughput in GB/s (1e9 bytes/s); latency_us: fixed cost per copy.
    """

    copy_kind: str
    src_kind: str
    dst_kind: str
    per_step: float
    bytes_each: int
    gbps: float
    latency_us: float


@dataclass(frozen=True)
class Workload:
    """A job template: training (constant step rate) or inference (diurnal request load).

    busy: fraction of wall time the GPU runs kernels (at peak load for inference); trough: the
    load at the daily minimum relative to the peak (inference only). latent: kernels that are not
    launched until a ``new_kernel`` injection switches one on. mem_gb: device memory in use.
    """

    name: str
    kind: str
    kernels: tuple[KernelSpec, ...]
    copies: tuple[CopySpec, ...]
    busy: float
    mem_gb: float
    latent: tuple[KernelSpec, ...] = ()
    trough: float = 1.0
    peak_hour_utc: int = 15

    def step_gpu_us(self) -> float:
        return sum(c.per_step * c.mean_us for k in self.kernels for c in k.configs)
