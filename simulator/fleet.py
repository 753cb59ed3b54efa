"""Fleet layout: hosts of 8 GPUs, stable GPU UUIDs, and which job (and process) runs on each GPU.

Layout (see docs/simulator.md): GPUs are packed 8 to a host (``gpu-node-000``, ...). From 16 GPUs
on, hosts alternate between LLM training (multi-node jobs of up to 4 hosts, one FSDP rank per
GPU) and a mixed host (a 4-GPU ViT DDP job plus 4 replicas of the inference service; the replicas
of every 8 mixed hosts form one service). Fleets under 16 GPUs split their GPUs between one
instance of each job, so that small test fleets still carry every workload. The first instance of
a workload is named after it (``train-llama``); later ones get a suffix (``train-llama-2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.catalog import SERVE_LLAMA, TRAIN_LLAMA, TRAIN_VIT, Workload

GPUS_PER_HOST = 8
GPU_MODEL = "NVIDIA H200"


@dataclass(frozen=True)
class Job:
    """One job instance: its name, workload and the fleet-wide GPU indices it runs on."""

    name: str
    workload: Workload
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Process:
    """One process: a training rank or a serving replica on one GPU."""

    job: int  # index into Fleet.jobs
    gpu: int  # fleet-wide GPU index
    pid: int
    run_id: str
    start: int = 0  # first hour it runs
    stop: int | None = None  # first hour it no longer runs (None: to the end of the run)


@dataclass
class Fleet:
    """Hosts, GPUs and jobs of a simulated fleet (everything is stable for a given seed)."""

    gpus: int
    hosts: list[str]
    gpu_host: np.ndarray  # host index per GPU
    gpu_local: np.ndarray  # index of the GPU inside its host (nvidia-smi index)
    gpu_uuid: list[str]
    jobs: list[Job]
    processes: list[Process]
    gpu_speed: np.ndarray  # static per-GPU speed factor (silicon/cooling lottery), ~1 +- 0.5 %

    def job_index(self, name: str) -> int:
        for i, job in enumerate(self.jobs):
            if job.name == name:
                return i
        raise ValueError(f"no job {name!r} in this fleet; jobs: {', '.join(j.name for j in self.jobs)}")


def new_gpu_uuid(rng: np.random.Generator) -> str:
    h = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16))
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _assign_jobs(gpus: int) -> list[tuple[Workload, list[int]]]:
    """(workload, GPU indices) per job instance, in fleet order."""
    if gpus < 2 * GPUS_PER_HOST:
        n_llama = min(GPUS_PER_HOST, math.ceil(gpus / 2))
        rest = gpus - n_llama
        n_vit = math.ceil(rest / 2)
        parts = [(TRAIN_LLAMA, n_llama), (TRAIN_VIT, n_vit), (SERVE_LLAMA, rest - n_vit)]
        out, at = [], 0
        for workload, n in parts:
            if n:
                out.append((workload, list(range(at, at + n))))
                at += n
        return out
    hosts = math.ceil(gpus / GPUS_PER_HOST)
    out: list[tuple[Workload, list[int]]] = []
    llama_group: list[int] = []
    serve_group: list[int] = []
    llama_hosts = serve_hosts = 0
    for host in range(hosts):
        ids = list(range(host * GPUS_PER_HOST, min(gpus, (host + 1) * GPUS_PER_HOST)))
        if host % 2 == 0:
            llama_group += ids
            llama_hosts += 1
            if llama_hosts % 4 == 0:
                out.append((TRAIN_LLAMA, llama_group))
                llama_group = []
        else:
            half = math.ceil(len(ids) / 2)
            out.append((TRAIN_VIT, ids[:half]))
            serve_group += ids[half:]
            serve_hosts += 1
            if serve_hosts % 8 == 0 and serve_group:
                out.append((SERVE_LLAMA, serve_group))
                serve_group = []
    if llama_group:
        out.append((TRAIN_LLAMA, llama_group))
    if serve_group:
        out.append((SERVE_LLAMA, serve_group))
    return out


def build_fleet(gpus: int, rng: np.random.Generator) -> Fleet:
    """Lay out ``gpus`` GPUs on hosts and place the jobs; all ids come from ``rng``."""
    if gpus < 1:
        raise ValueError(f"a fleet needs at least 1 GPU, got {gpus}")
    n_hosts = math.ceil(gpus / GPUS_PER_HOST)
    hosts = [f"gpu-node-{h:03d}" for h in range(n_hosts)]
    idx = np.arange(gpus)
    uuids = [new_gpu_uuid(rng) for _ in range(gpus)]
    speed = np.exp(rng.normal(0.0, 0.005, gpus))
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for workload, ids in _assign_jobs(gpus):
        seen[workload.name] = seen.get(workload.name, 0) + 1
        name = workload.name if seen[workload.name] == 1 else f"{workload.name}-{seen[workload.name]}"
        jobs.append(Job(name, workload, tuple(ids)))
    processes = []
    for j, job in enumerate(jobs):
        for g in job.gpus:
            processes.append(Process(j, g, int(rng.integers(2_000, 4_000_000)), rng.bytes(8).hex()))
    processes.sort(key=lambda p: p.gpu)
    return Fleet(gpus, hosts, idx // GPUS_PER_HOST, idx % GPUS_PER_HOST, uuids, jobs, processes, speed)
