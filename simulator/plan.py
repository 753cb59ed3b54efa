"""The plan of a run: every kernel series and copy stream of every process, with its hourly
multipliers, and the step rate of every job; injections are applied here, before any data is drawn.

A *kernel row* is one (process, kernel, launch configuration); it is active over an hour range
(so a launch-configuration change ends one row and starts another with the same kernel_id). Its
hourly duration and launch-count multipliers carry the injected effects; the noise model adds the
rest when the tables are drawn (see ``tables``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator.catalog import CLASS_NOISE, KERNEL_CLASSES, TRAIN_VIT, KernelSpec, LaunchConfig, Workload
from simulator.fleet import Fleet, Job, Process
from simulator.injections import Resolved
from simulator.noise import hourly_log_noise

#: Effective throughput of pageable host memory relative to pinned (staging through a bounce buffer).
PAGEABLE_RATIO = 0.42
#: Share of a GPU's time an intruding process (``contention``) keeps busy.
INTRUDER_BUSY = 0.2
#: Mean hours between restarts of a training job.
RESTART_EVERY_H = 36.0
#: Most kernel time a GPU can hold per wall-clock hour (launch gaps, host sync).
MAX_BUSY = 0.97


@dataclass
class KernelRows:
    """Columnar kernel rows (numpy arrays of equal length, ordered by GPU)."""

    proc: np.ndarray
    gpu: np.ndarray
    job: np.ndarray
    kernel: np.ndarray  # index into Plan.kernels
    grid: np.ndarray  # (n, 3)
    block: np.ndarray  # (n, 3)
    regs: np.ndarray
    smem: np.ndarray
    per_step: np.ndarray
    mean_ns: np.ndarray
    sigma: np.ndarray
    p_tail: np.ndarray
    klass: np.ndarray  # index into CLASS_ORDER
    series: np.ndarray  # shared-noise series (job, kernel, config)
    start: np.ndarray  # first active hour
    stop: np.ndarray  # first inactive hour
    dur_mult: np.ndarray  # (n, hours)
    launch_mult: np.ndarray  # (n, hours)


@dataclass
class CopyRows:
    """Columnar copy streams: one per (process, copy spec)."""

    proc: np.ndarray
    gpu: np.ndarray
    job: np.ndarray
    spec: list  # CopySpec per row
    per_step: np.ndarray
    bytes_each: np.ndarray
    latency_ns: np.ndarray
    gbps: np.ndarray  # (n, hours) throughput incl. injected drops
    pageable_from: np.ndarray  # hour from which HtoD pinned copies are pageable (hours = never)


@dataclass
class Plan:
    fleet: Fleet
    hours: int
    jobs: list[Job]
    processes: list[Process]
    proc_start: np.ndarray  # first hour each process runs
    proc_stop: np.ndarray  # first hour each process no longer runs
    kernels: list[KernelSpec]
    rows: KernelRows
    copies: CopyRows
    steps: np.ndarray  # (jobs, hours) steps per hour
    load: np.ndarray  # (jobs, hours) relative load (1 for training)
    throttle: np.ndarray  # (gpus, hours) SM-clock slowdown factor (1 = none)
    series_noise: np.ndarray  # (series, hours) log-multipliers
    restart: np.ndarray = None  # (jobs, hours) the job restarts in this hour (its first window is lost)
    pid: np.ndarray = None  # (processes, hours) pid of the process incarnation running in each hour
    run: np.ndarray = None  # (processes, hours) index into run_ids
    run_ids: list = field(default_factory=list)


CLASS_ORDER = tuple(KERNEL_CLASSES)


def _diurnal(workload: Workload, hours: int, start_hour_utc: int) -> np.ndarray:
    if workload.kind != "inference":
        return np.ones(hours)
    t = (np.arange(hours) + start_hour_utc - workload.peak_hour_utc) * 2 * math.pi / 24
    return workload.trough + (1 - workload.trough) * (0.5 + 0.5 * np.cos(t))


def _changed_config(c: LaunchConfig, pct: float) -> LaunchConfig:
    """A new launch configuration of the same kernel: smaller blocks, more of them, more registers."""
    bx = max(32, c.block[0] // 4)
    gx = c.grid[0] * (c.block[0] // bx)
    return LaunchConfig((gx, c.grid[1], c.grid[2]), (bx, c.block[1], c.block[2]), min(255, c.registers + 24), c.smem,
                        c.per_step, c.mean_us * (1 + pct / 100))


def build_plan(fleet: Fleet, injections: list[Resolved], hours: int, start_hour_utc: int, rng: np.random.Generator) -> Plan:
    """Lay out kernel rows and copy streams, apply the injections, and draw the shared hourly noise."""
    jobs = list(fleet.jobs)
    processes = list(fleet.processes)
    proc_start = [p.start for p in processes]
    proc_stop = [hours if p.stop is None else p.stop for p in processes]
    # Contention: an ad-hoc process of another job joins one GPU at the onset.
    for r in injections:
        if r.kind == "contention":
            jobs.append(Job(f"adhoc-notebook-{len(jobs)}", TRAIN_VIT, (r.gpu,)))
            processes.append(Process(len(jobs) - 1, r.gpu, int(rng.integers(2_000, 4_000_000)), rng.bytes(8).hex()))
            proc_start.append(r.onset)
            proc_stop.append(hours)
    order = sorted(range(len(processes)), key=lambda i: (processes[i].gpu, i))
    processes = [processes[i] for i in order]
    proc_start = np.array([proc_start[i] for i in order], np.int64)
    proc_stop = np.array([proc_stop[i] for i in order], np.int64)

    kernels: list[KernelSpec] = []
    kernel_index: dict[str, int] = {}

    def kid(k: KernelSpec) -> int:
        if k.mangled not in kernel_index:
            kernel_index[k.mangled] = len(kernels)
            kernels.append(k)
        return kernel_index[k.mangled]

    by_job: dict[int, list[Resolved]] = {}
    for r in injections:
        by_job.setdefault(r.job, []).append(r)

    cols: dict[str, list] = {n: [] for n in ("proc", "gpu", "job", "kernel", "grid", "block", "regs", "smem", "per_step",
                                             "mean_us", "klass", "series", "start", "stop", "cfg_key")}
    series_ids: dict[tuple, int] = {}

    def add(p: int, proc: Process, k: KernelSpec, ci: int, c: LaunchConfig, start: int, stop: int) -> None:
        key = (proc.job, k.mangled, c.grid, c.block, c.registers)
        series_ids.setdefault(key, len(series_ids))
        for name, value in (("proc", p), ("gpu", proc.gpu), ("job", proc.job), ("kernel", kid(k)), ("grid", c.grid),
                            ("block", c.block), ("regs", c.registers), ("smem", c.smem), ("per_step", c.per_step),
                            ("mean_us", c.mean_us), ("klass", CLASS_ORDER.index(k.klass)), ("series", series_ids[key]),
                            ("start", start), ("stop", stop), ("cfg_key", (k.mangled, ci))):
            cols[name].append(value)

    for p, proc in enumerate(processes):
        job = jobs[proc.job]
        wl = job.workload
        begin, end = int(proc_start[p]), int(proc_stop[p])
        todo = by_job.get(proc.job, [])
        for k in wl.kernels:
            for ci, c in enumerate(k.configs):
                stop = end
                for r in todo:
                    applies = r.kernel is k and (r.gpu is None or r.gpu == proc.gpu)
                    if applies and r.kind == "kernel_vanished":
                        stop = min(stop, r.onset)
                    if applies and r.kind == "launch_config_change" and ci == 0:
                        stop = min(stop, r.onset)
                        add(p, proc, k, ci, _changed_config(c, r.pct), r.onset, end)
                add(p, proc, k, ci, c, begin, stop)
        for r in todo:
            if r.kind == "new_kernel" and (r.gpu is None or r.gpu == proc.gpu):
                c = r.kernel.configs[0]
                mean_us = r.pct / 100 * wl.step_gpu_us() / c.per_step
                add(p, proc, r.kernel, 0, LaunchConfig(c.grid, c.block, c.registers, c.smem, c.per_step, mean_us), r.onset, end)

    n = len(cols["proc"])
    klass = np.array(cols["klass"], np.int64)
    noise = np.array([CLASS_NOISE[CLASS_ORDER[i]] for i in klass]).reshape(n, 3)
    order = np.argsort(np.array(cols["gpu"]), kind="stable")
    rows = KernelRows(
        proc=np.array(cols["proc"], np.int64), gpu=np.array(cols["gpu"], np.int64), job=np.array(cols["job"], np.int64),
        kernel=np.array(cols["kernel"], np.int64), grid=np.array(cols["grid"], np.int64).reshape(n, 3),
        block=np.array(cols["block"], np.int64).reshape(n, 3), regs=np.array(cols["regs"], np.int64),
        smem=np.array(cols["smem"], np.int64), per_step=np.array(cols["per_step"], float),
        mean_ns=np.array(cols["mean_us"], float) * 1e3, sigma=noise[:, 0], p_tail=noise[:, 1], klass=klass,
        series=np.array(cols["series"], np.int64), start=np.array(cols["start"], np.int64),
        stop=np.array(cols["stop"], np.int64), dur_mult=np.ones((n, hours)), launch_mult=np.ones((n, hours)),
    )
    rows = KernelRows(**{f: (v[order] if isinstance(v, np.ndarray) else v) for f, v in rows.__dict__.items()})
    hourly_sigma = np.zeros(len(series_ids))
    hourly_sigma[rows.series] = noise[order, 2]

    # Step rates: training runs at a constant rate; inference follows its daily load curve.
    steps = np.zeros((len(jobs), hours))
    load = np.ones((len(jobs), hours))
    for j, job in enumerate(jobs):
        wl = job.workload
        busy = INTRUDER_BUSY if job.name.startswith("adhoc-") else wl.busy
        load[j] = _diurnal(wl, hours, start_hour_utc)
        jitter = rng.normal(0.0, 0.02 if wl.kind == "inference" else 0.004, hours)
        steps[j] = 3600e6 * busy * load[j] / wl.step_gpu_us() * np.exp(jitter)

    throttle = np.ones((fleet.gpus, hours))
    for r in injections:
        on = slice(r.onset, hours)
        hit = rows.job == r.job
        if r.kernel is not None:
            hit &= rows.kernel == kernel_index.get(r.kernel.mangled, -1)
        if r.gpu is not None:
            hit &= rows.gpu == r.gpu
        if r.kind == "kernel_slowdown":
            rows.dur_mult[hit, on] *= r.factor
        elif r.kind == "more_launches":
            rows.launch_mult[hit, on] *= r.factor
        elif r.kind in ("pageable_memcpy", "gpu_idle_gaps"):
            steps[r.job, on] /= r.factor
        elif r.kind == "clock_throttle":
            throttle[r.gpu, on] = r.factor
            rows.dur_mult[rows.gpu == r.gpu, on] *= r.factor
        elif r.kind == "contention":
            rows.dur_mult[(rows.gpu == r.gpu) & (rows.job == r.job), on] *= r.factor

    synchronous = np.array([j.workload.kind == "training" and not j.name.startswith("adhoc-") for j in jobs])
    _cap_busy(rows, steps, synchronous, fleet.gpus, hours)
    copies = _copy_rows(processes, jobs, proc_start, injections, hours, rng)
    series_noise = hourly_log_noise(rng, len(series_ids), hours, hourly_sigma)
    plan = Plan(fleet, hours, jobs, processes, proc_start, proc_stop, kernels, rows, copies, steps, load, throttle, series_noise)
    _restarts(plan, rng)
    return plan


def _restarts(plan: Plan, rng: np.random.Generator, per_hours: float | None = None) -> None:
    """Training jobs restart now and then (preemption, crash, resume from checkpoint): every rank
    gets a new pid and run_id from the restart hour on, and the job is down for that hour's first
    window. Restarts arrive as a Poisson process, about one per ``per_hours`` hours per job."""
    H, P = plan.hours, len(plan.processes)
    per_hours = per_hours or RESTART_EVERY_H
    plan.restart = np.zeros((len(plan.jobs), H), bool)
    for j, job in enumerate(plan.jobs):
        if job.workload.kind == "training" and H > 2:
            at = rng.integers(1, H, rng.poisson(H / per_hours))
            plan.restart[j, at] = True
    plan.pid = np.zeros((P, H), np.int64)
    plan.run = np.zeros((P, H), np.int64)
    for p, proc in enumerate(plan.processes):
        pid, run = proc.pid, len(plan.run_ids)
        plan.run_ids.append(proc.run_id)
        for h in range(H):
            if plan.restart[proc.job, h] and h > plan.proc_start[p]:
                pid, run = int(rng.integers(2_000, 4_000_000)), len(plan.run_ids)
                plan.run_ids.append(rng.bytes(8).hex())
            plan.pid[p, h], plan.run[p, h] = pid, run


def _cap_busy(rows: KernelRows, steps: np.ndarray, synchronous: np.ndarray, gpus: int, hours: int, cap: float = MAX_BUSY) -> None:
    """Slow a job's step rate where its busiest GPU would need more kernel time than the hour has.

    A synchronous (training) job runs at the pace of its slowest rank: when injected slowdowns push
    a GPU's kernel time past ``cap`` of the wall time, the whole job makes fewer steps (in place).
    Inference replicas are independent and are left alone (their sm_util saturates instead).
    """
    h = np.arange(hours)
    active = (rows.start[:, None] <= h) & (h < rows.stop[:, None])
    work = rows.per_step[:, None] * rows.mean_ns[:, None] * rows.dur_mult * rows.launch_mult * active
    for _ in range(2):
        busy = np.zeros((gpus, hours))
        np.add.at(busy, rows.gpu, work * steps[rows.job] / 3.6e12)
        worst = np.zeros_like(steps)
        np.maximum.at(worst, rows.job, busy[rows.gpu])
        steps[synchronous] *= np.minimum(1.0, cap / np.maximum(worst, 1e-12))[synchronous]


def _copy_rows(processes, jobs, proc_start, injections, hours, rng) -> CopyRows:
    proc, gpu, job, spec = [], [], [], []
    for p, pr in enumerate(processes):
        for c in jobs[pr.job].workload.copies:
            proc.append(p)
            gpu.append(pr.gpu)
            job.append(pr.job)
            spec.append(c)
    n = len(proc)
    proc, gpu, job = np.array(proc, np.int64), np.array(gpu, np.int64), np.array(job, np.int64)
    gbps = np.array([c.gbps for c in spec])[:, None] * np.exp(rng.normal(0.0, 0.03, (n, hours)))
    pageable_from = np.full(n, hours, np.int64)
    htod_pinned = np.array([c.copy_kind == "HtoD" and c.src_kind == "pinned" for c in spec], bool)
    for r in injections:
        hit = (job == r.job) & htod_pinned
        if r.gpu is not None:
            hit &= gpu == r.gpu
        if r.kind == "pageable_memcpy":
            pageable_from[hit] = np.minimum(pageable_from[hit], r.onset)
            gbps[hit, r.onset:] *= PAGEABLE_RATIO
        elif r.kind == "memcpy_throughput_drop":
            gbps[hit, r.onset:] /= r.factor
    return CopyRows(proc, gpu, job, spec, np.array([c.per_step for c in spec], float),
                    np.array([c.bytes_each for c in spec], np.int64),
                    np.array([c.latency_us * 1e3 for c in spec]), gbps, pageable_from)
