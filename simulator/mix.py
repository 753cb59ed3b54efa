"""A varied job mix for ``simulate_fleet(..., jobs=N)``: many models, sizes and kernel mixes,
jobs that start late, end early or move to other GPUs.

The first three jobs are the unmodified templates under their plain names (``train-llama``,
``train-vit``, ``serve-llama``), so the default injections and ``--inject job=...`` keep working.
The others are *variants* of a template: a model size (a scale on per-launch durations and on
the grid's first dimension, so every variant has its own launch configurations), a kernel mix
(a variant drops some of the template's non-GEMM kernels: no fused Adam in an inference-style
fine-tune, no softmax for a model with a fused loss, ...), and a size in GPUs (training: 1 to 32
GPUs, weighted to 8-GPU multiples; inference: 1 to 16 replicas).

Life cycle over the run (hours ``0..H``): about a sixth of the variants start late, a sixth end
early, and a sixth *move*: at some hour their processes stop and new ones (new pids and run ids)
start on other GPUs (a rescheduled job) -- GPUs of the spare pool (1/16 of the fleet, idle at the
start) or GPUs an ended or moved job freed. A late job also takes freed GPUs when it fits, so GPUs
are reused within the day as on a real cluster.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from simulator.catalog import SERVE_LLAMA, TRAIN_LLAMA, TRAIN_VIT, Workload
from simulator.fleet import GPUS_PER_HOST, Fleet, Job, Process, new_gpu_uuid

TEMPLATES = (TRAIN_LLAMA, TRAIN_VIT, SERVE_LLAMA)
#: Model sizes per template: (suffix, scale of the per-launch durations).
SIZES = {
    "train-llama": (("1b", 0.25), ("3b", 0.45), ("8b", 1.0), ("13b", 1.6), ("34b", 2.6), ("70b", 3.8)),
    "train-vit": (("b16", 0.35), ("l16", 1.0), ("h14", 1.9), ("g14", 3.1)),
    "serve-llama": (("1b", 0.3), ("8b", 1.0), ("13b", 1.5), ("70b", 3.2)),
}
#: Share of variants that start late / end early / move.
P_LATE, P_EARLY, P_MOVE = 1 / 6, 1 / 6, 1 / 6


def _variant(wl: Workload, suffix: str, scale: float, rng: np.random.Generator) -> Workload:
    """The template at another model size with a slightly different kernel mix."""
    kernels = []
    for k in wl.kernels:
        if k.klass not in ("gemm", "attention", "conv", "nccl") and rng.random() < 0.2:
            continue  # this model does not launch that kernel
        configs = tuple(dataclasses.replace(c, grid=(max(1, round(c.grid[0] * math.sqrt(scale))), c.grid[1], c.grid[2]),
                                            mean_us=c.mean_us * scale) for c in k.configs)
        kernels.append(dataclasses.replace(k, configs=configs))
    mem = min(139.0, wl.mem_gb * (0.6 + 0.4 * scale))
    return dataclasses.replace(wl, name=f"{wl.name}-{suffix}", kernels=tuple(kernels), mem_gb=mem)


def _sizes(n: int, gpus: int, kinds: list[str], rng: np.random.Generator) -> list[int]:
    """GPUs per job, summing to ``gpus``: training jobs favour multiples of a host."""
    want = []
    for kind in kinds:
        if kind == "training":
            want.append(int(rng.choice([1, 2, 4, 8, 8, 16, 16, 32])))
        else:
            want.append(int(rng.choice([1, 2, 4, 8, 16])))
    want = np.array(want, float)
    sizes = np.maximum(1, np.floor(want * gpus / want.sum())).astype(int)
    while sizes.sum() > gpus:  # more jobs than GPUs allow at these shares: trim the largest
        sizes[np.argmax(sizes)] -= 1
    sizes[np.argmax(sizes)] += gpus - sizes.sum()
    return [int(s) for s in sizes]


def build_mixed_fleet(gpus: int, jobs: int, hours: int, rng: np.random.Generator) -> Fleet:
    """``gpus`` GPUs running ``jobs`` jobs (at least 3, at most ``gpus``) over ``hours`` hours."""
    if jobs < 3:
        raise ValueError(f"--jobs needs at least 3 (one of each workload), got {jobs}")
    if jobs > gpus:
        raise ValueError(f"--jobs {jobs} is more than the {gpus} GPUs can hold (one GPU per job at least)")
    n_hosts = math.ceil(gpus / GPUS_PER_HOST)
    hosts = [f"gpu-node-{h:03d}" for h in range(n_hosts)]
    idx = np.arange(gpus)
    uuids = [new_gpu_uuid(rng) for _ in range(gpus)]
    speed = np.exp(rng.normal(0.0, 0.005, gpus))

    workloads: list[Workload] = list(TEMPLATES)
    names = [w.name for w in TEMPLATES]
    seen: dict[str, int] = {}
    for _ in range(jobs - 3):
        t = TEMPLATES[int(rng.choice(3, p=[0.45, 0.25, 0.30]))]
        suffix, scale = SIZES[t.name][int(rng.integers(len(SIZES[t.name])))]
        wl = _variant(t, suffix, scale, rng)
        seen[wl.name] = seen.get(wl.name, 0) + 1
        workloads.append(wl)
        names.append(wl.name if seen[wl.name] == 1 else f"{wl.name}-{seen[wl.name]}")
    spare = min(gpus - jobs, gpus // 16)  # GPUs idle at the start (drained nodes, a scheduling reserve)
    sizes = _sizes(jobs, gpus - spare, [w.kind for w in workloads], rng)

    # Place jobs on contiguous GPU ranges, biggest first (so multi-host jobs start on a host).
    order = sorted(range(jobs), key=lambda j: -sizes[j])
    placed: dict[int, list[int]] = {}
    at = 0
    for j in order:
        placed[j] = list(range(at, at + sizes[j]))
        at += sizes[j]

    # Life cycle: (start, stop) per job; the three templates run all day.
    start = [0] * jobs
    stop = [hours] * jobs
    move_at: dict[int, int] = {}
    if hours >= 4:
        for j in range(3, jobs):
            u = rng.random()
            if u < P_LATE:
                start[j] = int(rng.integers(1, hours // 2 + 1))
            elif u < P_LATE + P_EARLY:
                stop[j] = int(rng.integers(hours // 2, hours))
            elif u < P_LATE + P_EARLY + P_MOVE:
                move_at[j] = int(rng.integers(hours // 4, hours - 1))
    # Free GPU blocks (hour from which free, GPU ids): the spare pool from the start, then the
    # GPUs of every job that ends. Movers go first (by move hour), then late jobs (by start hour);
    # each takes the first block that is free in time and large enough.
    free = [(0, list(range(gpus - spare, gpus)))] if spare else []
    free += sorted((stop[j], placed[j]) for j in range(jobs) if stop[j] < hours)
    segments = {j: [(placed[j], start[j], stop[j])] for j in range(jobs)}

    def take(at: int, n: int) -> list[int] | None:
        for i, (t, ids) in enumerate(free):
            if t <= at and len(ids) >= n:
                free[i] = (t, ids[n:])
                return ids[:n]
        return None

    for j in sorted(move_at, key=move_at.get):
        m = move_at[j]
        ids = take(m, sizes[j])
        if ids is not None:
            segments[j] = [(placed[j], 0, m), (ids, m, hours)]
            free.append((m, placed[j]))
    for j in sorted((j for j in range(jobs) if start[j] > 0), key=lambda j: start[j]):
        ids = take(start[j], sizes[j])
        if ids is not None:
            segments[j] = [(ids, start[j], stop[j])]

    job_list: list[Job] = []
    processes: list[Process] = []
    for j in range(jobs):
        used = sorted({g for ids, _, _ in segments[j] for g in ids})
        job_list.append(Job(names[j], workloads[j], tuple(used)))
        for ids, s, e in segments[j]:
            for g in ids:
                processes.append(Process(j, g, int(rng.integers(2_000, 4_000_000)), rng.bytes(8).hex(), s, e))
    processes.sort(key=lambda p: (p.gpu, p.start))
    return Fleet(gpus, hosts, idx // GPUS_PER_HOST, idx % GPUS_PER_HOST, uuids, job_list, processes, speed)
