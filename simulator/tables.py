"""Draw one hour of the four shard tables (kernels, memcpy, device, health) for the whole fleet.

Rows of every table come out ordered by GPU, hence by host, so the engine can cut one shard per
host with ``slice``. Device counters are derived from the kernel rows just drawn (busy time, and
its tensor-core, DRAM and occupancy shares per kernel class), so they agree with the kernel load.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from simulator.catalog import CLASS_NOISE, KERNEL_CLASSES
from simulator.fleet import GPU_MODEL
from simulator.noise import WindowSampler, mixture_mean_factor
from simulator.plan import CLASS_ORDER, Plan

CUPTI_VERSION = "13.4.92"
SM_CLOCK_MHZ = 1980.0  # H100/H200 SXM maximum SM clock, held under load when not throttled
MEM_CLOCK_MHZ = 3201.0  # H200 HBM3e
POWER_IDLE_W, POWER_CAP_W = 85.0, 700.0
#: NVML clocks_event_reasons bits (nvmlClocksEventReason*).
SW_POWER_CAP, SW_THERMAL, HW_THERMAL = 0x4, 0x20, 0x40

_TS = pa.timestamp("us", tz="UTC")
_CLASS_SHARES = np.array([KERNEL_CLASSES[c] for c in CLASS_ORDER])  # (classes, 3): tensor, dram, occupancy


@dataclass
class Hour:
    """One hour of all four tables, plus the host of each row (for cutting shards)."""

    tables: dict[str, pa.Table]
    hosts: dict[str, np.ndarray]


class HourDrawer:
    """Draws hour after hour of one plan; ``rng`` is consumed in a fixed order (deterministic)."""

    def __init__(self, plan: Plan, start: dt.datetime, rng: np.random.Generator, *, window_s: int, device_interval_s: int):
        self.plan, self.start, self.rng = plan, start, rng
        self.window_s, self.device_interval_s = window_s, device_interval_s
        self.windows = 3600 // window_s
        f, p = plan.fleet, plan.processes
        self.proc_gpu = np.array([x.gpu for x in p], np.int64)
        self.proc_job = np.array([x.job for x in p], np.int64)
        self.run_ids = pa.array(plan.run_ids)
        self.job_names = pa.array([j.name for j in plan.jobs])
        self.uuids = pa.array(f.gpu_uuid)
        self.host_names = pa.array(f.hosts)
        self.kernel_names = pa.array([k.name for k in plan.kernels])
        self.kernel_ids = pa.array([k.kernel_id for k in plan.kernels])
        self.temp_offset = rng.normal(0.0, 2.5, f.gpus)
        # Device memory in use: the largest footprint of a job on the GPU, a little noise per GPU.
        mem = np.zeros(f.gpus)
        for j in plan.jobs:
            for g in j.gpus:
                mem[g] = max(mem[g], j.workload.mem_gb * 1e9)
        self.mem_used = mem * (1 + rng.normal(0.0, 0.004, f.gpus))
        self.mix_factor = mixture_mean_factor(plan.rows.sigma, plan.rows.p_tail)
        class_noise = np.array([CLASS_NOISE[c] for c in CLASS_ORDER])
        self.sampler = WindowSampler(class_noise[:, 0], class_noise[:, 1])
        self.inference = np.array([j.workload.kind == "inference" for j in plan.jobs], float)

    # -- kernels ---------------------------------------------------------------------------------
    def _kernels(self, h: int, hour_us: int):
        plan, rng, W, rows = self.plan, self.rng, self.windows, self.plan.rows
        idx = np.nonzero((rows.start <= h) & (h < rows.stop))[0]
        job = rows.job[idx]
        gpu = rows.gpu[idx]
        lam_hour = rows.per_step[idx] * plan.steps[job, h] * rows.launch_mult[idx, h]
        # Inference kernels run slightly longer at peak load (larger batches): +-1 % over the day.
        load_term = 1 + 0.02 * (plan.load[job, h] - 0.65) * self.inference[job]
        mean = (rows.mean_ns[idx] * rows.dur_mult[idx, h] * np.exp(plan.series_noise[rows.series[idx], h])
                * np.exp(rng.normal(0.0, 0.003, idx.size)) / plan.fleet.gpu_speed[gpu] * load_term)
        rep = np.repeat(np.arange(idx.size), W)
        win = np.tile(np.arange(W), idx.size)
        down = plan.restart[job[rep], h] & (win == 0)
        lam = lam_hour[rep] / W * np.exp(rng.normal(0.0, 0.015, rep.size)) * ~down
        median = (mean / self.mix_factor[idx])[rep] * np.exp(rng.normal(0.0, 0.003, rep.size))
        r = idx[rep]
        launches, total, mn, mx, sumsq, offsets, hb, hc = self.sampler.draw(rng, lam, median, rows.klass[r])
        keep = launches > 0
        sel = np.nonzero(keep)[0]
        # Histogram list columns of the kept rows.
        lens = np.diff(offsets)[sel]
        starts = offsets[:-1][sel]
        flat = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens) + np.arange(lens.sum())
        new_off = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
        r, win = r[sel], win[sel]
        g = rows.gpu[r]
        proc = rows.proc[r]
        total_i = np.rint(total[sel]).astype(np.int64)
        n_l = launches[sel]
        table = pa.table({
            "window_start": pa.array(hour_us + win * self.window_s * 1_000_000, _TS),
            "window_s": pa.array(np.full(sel.size, self.window_s, np.int32)),
            "host": self.host_names.take(pa.array(plan.fleet.gpu_host[g])),
            "gpu_uuid": self.uuids.take(pa.array(g)),
            "gpu_index": pa.array(plan.fleet.gpu_local[g].astype(np.int16)),
            "gpu_model": pa.array([GPU_MODEL] * sel.size, pa.string()),
            "job": self.job_names.take(pa.array(rows.job[r])),
            "run_id": self.run_ids.take(pa.array(plan.run[proc, h])),
            "pid": pa.array(plan.pid[proc, h].astype(np.int32)),
            "kernel": self.kernel_names.take(pa.array(rows.kernel[r])),
            "kernel_id": self.kernel_ids.take(pa.array(rows.kernel[r])),
            "grid_x": pa.array(rows.grid[r, 0].astype(np.int32)),
            "grid_y": pa.array(rows.grid[r, 1].astype(np.int32)),
            "grid_z": pa.array(rows.grid[r, 2].astype(np.int32)),
            "block_x": pa.array(rows.block[r, 0].astype(np.int32)),
            "block_y": pa.array(rows.block[r, 1].astype(np.int32)),
            "block_z": pa.array(rows.block[r, 2].astype(np.int32)),
            "registers_per_thread": pa.array(rows.regs[r].astype(np.int16)),
            "shared_mem_bytes": pa.array(rows.smem[r].astype(np.int32)),
            "launches": pa.array(n_l),
            "total_ns": pa.array(total_i),
            "min_ns": pa.array(np.floor(mn[sel]).astype(np.int64)),
            "max_ns": pa.array(np.ceil(mx[sel]).astype(np.int64)),
            "sumsq_ns2": pa.array(sumsq[sel]),
            "hist_bucket": pa.ListArray.from_arrays(pa.array(new_off), pa.array(hb[flat].astype(np.int16))),
            "hist_count": pa.ListArray.from_arrays(pa.array(new_off), pa.array(hc[flat].astype(np.int64))),
            "sampling_duty": pa.array(np.ones(sel.size, np.float32)),
        })
        G, P = plan.fleet.gpus, len(plan.processes)
        shares = _CLASS_SHARES[rows.klass[r]]
        cell = g * W + win
        busy = np.bincount(cell, weights=total_i, minlength=G * W).reshape(G, W)
        per_class = [np.bincount(cell, weights=total_i * shares[:, i], minlength=G * W).reshape(G, W) for i in range(3)]
        records = np.bincount(proc * W + win, weights=n_l, minlength=P * W).reshape(P, W)
        return table, plan.fleet.gpu_host[g], busy, per_class, records

    # -- memcpy ----------------------------------------------------------------------------------
    def _memcpy(self, h: int, hour_us: int):
        plan, rng, W, c = self.plan, self.rng, self.windows, self.plan.copies
        idx = np.nonzero((plan.proc_start[c.proc] <= h) & (h < plan.proc_stop[c.proc]))[0]
        rep = np.repeat(idx, W)
        win = np.tile(np.arange(W), idx.size)
        down = plan.restart[c.job[rep], h] & (win == 0)
        lam = c.per_step[rep] * plan.steps[c.job[rep], h] / W * np.exp(rng.normal(0.0, 0.015, rep.size)) * ~down
        count = rng.poisson(lam)
        keep = count > 0
        rep, win, count = rep[keep], win[keep], count[keep]
        pageable = h >= c.pageable_from[rep]
        nbytes = count * c.bytes_each[rep]
        latency = c.latency_ns[rep] * np.where(pageable, 2.5, 1.0)
        total = np.rint(count * latency + nbytes / c.gbps[rep, h]).astype(np.int64)
        kinds = np.array([(s.copy_kind, s.src_kind, s.dst_kind) for s in c.spec], dtype=object).reshape(-1, 3)
        src = kinds[rep, 1].copy()
        src[pageable] = "pageable"
        g = c.gpu[rep]
        proc = c.proc[rep]
        table = pa.table({
            "window_start": pa.array(hour_us + win * self.window_s * 1_000_000, _TS),
            "window_s": pa.array(np.full(rep.size, self.window_s, np.int32)),
            "host": self.host_names.take(pa.array(plan.fleet.gpu_host[g])),
            "gpu_uuid": self.uuids.take(pa.array(g)),
            "gpu_index": pa.array(plan.fleet.gpu_local[g].astype(np.int16)),
            "job": self.job_names.take(pa.array(c.job[rep])),
            "run_id": self.run_ids.take(pa.array(plan.run[proc, h])),
            "pid": pa.array(plan.pid[proc, h].astype(np.int32)),
            "copy_kind": pa.array(kinds[rep, 0].tolist(), pa.string()),
            "src_kind": pa.array(src.tolist(), pa.string()),
            "dst_kind": pa.array(kinds[rep, 2].tolist(), pa.string()),
            "count": pa.array(count.astype(np.int64)),
            "bytes": pa.array(nbytes.astype(np.int64)),
            "total_ns": pa.array(total),
            "sampling_duty": pa.array(np.ones(rep.size, np.float32)),
        })
        G, P = plan.fleet.gpus, len(plan.processes)
        is_htod = kinds[rep, 0] == "HtoD"
        is_dtoh = kinds[rep, 0] == "DtoH"
        cell = g * W + win
        rx = np.bincount(cell, weights=nbytes * is_htod, minlength=G * W).reshape(G, W)
        tx = np.bincount(cell, weights=nbytes * is_dtoh, minlength=G * W).reshape(G, W)
        records = np.bincount(proc * W + win, weights=count, minlength=P * W).reshape(P, W)
        return table, plan.fleet.gpu_host[g], rx, tx, records

    # -- device ----------------------------------------------------------------------------------
    def _device(self, h: int, hour_us: int, busy, per_class, rx, tx):
        plan, rng = self.plan, self.rng
        G, S = plan.fleet.gpus, 3600 // self.device_interval_s
        per_win = self.window_s // self.device_interval_s
        win_ns = self.window_s * 1e9
        w_of = np.arange(S) // per_win

        def expand(a, cap=1.0):
            return np.minimum(a[:, w_of] / win_ns, cap)

        frac = expand(busy)
        tensor, dram, occ = (expand(x) for x in per_class)
        noise = np.exp(rng.normal(0.0, 0.04, (4, G, S)))
        sm = np.clip(100 * frac * noise[0], 0, 100)
        tensor_u = np.clip(100 * tensor * noise[1], 0, 100)
        dram_u = np.clip(100 * dram * noise[2], 0, 100)
        occ_u = np.clip(100 * occ * noise[3], 0, 100)
        thr = plan.throttle[:, h][:, None] * np.ones((1, S))
        throttled = thr > 1.0
        load = np.minimum(100.0, 0.45 * sm + 0.45 * tensor_u + 0.25 * dram_u)
        power = POWER_IDLE_W + (POWER_CAP_W - POWER_IDLE_W) * load / 100 * np.exp(rng.normal(0.0, 0.03, (G, S)))
        power = np.minimum(power, POWER_CAP_W)
        power = np.where(throttled, POWER_CAP_W - rng.uniform(0, 12, (G, S)), power)
        temp = 30 + 0.058 * power + self.temp_offset[:, None] + rng.normal(0.0, 0.7, (G, S))
        temp = np.where(throttled, 87 + rng.uniform(0, 5, (G, S)), temp)
        clock = np.where(throttled, np.round(SM_CLOCK_MHZ / thr / 15 + rng.integers(-1, 2, (G, S))) * 15, SM_CLOCK_MHZ)
        u = rng.random((G, S))
        reasons = np.where(throttled, SW_THERMAL | (u < 0.25) * HW_THERMAL | (u > 0.6) * SW_POWER_CAP, 0).astype(np.int64)
        pcie_rx = expand(rx, np.inf) * 1e9 / self.window_s * np.exp(rng.normal(0.0, 0.05, (G, S))) + 2e6
        pcie_tx = expand(tx, np.inf) * 1e9 / self.window_s * np.exp(rng.normal(0.0, 0.05, (G, S))) + 1e6
        mem = self.mem_used[:, None] * (1 + rng.normal(0.0, 0.0005, (G, S)))
        gpu = np.repeat(np.arange(G), S)
        ts = hour_us + np.tile(np.arange(S), G) * self.device_interval_s * 1_000_000
        table = pa.table({
            "ts": pa.array(ts, _TS),
            "host": self.host_names.take(pa.array(plan.fleet.gpu_host[gpu])),
            "gpu_uuid": self.uuids.take(pa.array(gpu)),
            "gpu_index": pa.array(plan.fleet.gpu_local[gpu].astype(np.int16)),
            "gpu_model": pa.array([GPU_MODEL] * gpu.size, pa.string()),
            "sm_util_pct": pa.array(np.rint(sm).ravel().astype(np.float32)),  # NVML: integer %
            "sm_occupancy_pct": pa.array(np.round(occ_u, 2).ravel().astype(np.float32)),  # GPM
            "tensor_util_pct": pa.array(np.round(tensor_u, 2).ravel().astype(np.float32)),
            "dram_bw_util_pct": pa.array(np.round(dram_u, 2).ravel().astype(np.float32)),
            "pcie_tx_bytes_s": pa.array(np.rint(pcie_tx / 1024).ravel() * 1024),  # NVML: KB/s
            "pcie_rx_bytes_s": pa.array(np.rint(pcie_rx / 1024).ravel() * 1024),
            "power_w": pa.array((np.rint(power * 1000) / 1000).ravel().astype(np.float32)),  # NVML: mW
            "temp_c": pa.array(np.rint(temp).ravel().astype(np.float32)),  # NVML: integer degrees C
            "sm_clock_mhz": pa.array(clock.ravel().astype(np.float32)),
            "mem_clock_mhz": pa.array(np.full(gpu.size, MEM_CLOCK_MHZ, np.float32)),
            "clocks_event_reasons": pa.array(reasons.ravel()),
            "mem_used_bytes": pa.array(mem.ravel().astype(np.int64)),
        })
        return table, plan.fleet.gpu_host[gpu]

    # -- health ----------------------------------------------------------------------------------
    def _health(self, h: int, hour_us: int, records):
        plan, rng, W = self.plan, self.rng, self.windows
        procs = np.nonzero((plan.proc_start <= h) & (h < plan.proc_stop))[0]
        p = np.repeat(procs, W)
        win = np.tile(np.arange(W), procs.size)
        up = ~(plan.restart[self.proc_job[p], h] & (win == 0))  # no collector runs while the job is down
        p, win = p[up], win[up]
        rec = records[p, win].astype(np.int64)
        dropped = np.where(rng.random(p.size) < 0.004, np.rint(rec * rng.uniform(1e-5, 1e-3, p.size)), 0).astype(np.int64)
        callback = rec * 0.32e-6 * np.exp(rng.normal(0.0, 0.08, p.size))
        overhead = 100 * callback / self.window_s + 0.02
        g = self.proc_gpu[p]
        table = pa.table({
            "window_start": pa.array(hour_us + win * self.window_s * 1_000_000, _TS),
            "window_s": pa.array(np.full(p.size, self.window_s, np.int32)),
            "host": self.host_names.take(pa.array(plan.fleet.gpu_host[g])),
            "job": self.job_names.take(pa.array(self.proc_job[p])),
            "run_id": self.run_ids.take(pa.array(plan.run[p, h])),
            "pid": pa.array(plan.pid[p, h].astype(np.int32)),
            "records": pa.array(rec),
            "dropped_records": pa.array(dropped),
            "callback_s": pa.array(callback),
            "overhead_pct": pa.array(overhead.astype(np.float32)),
            "sampling_duty": pa.array(np.ones(p.size, np.float32)),
            "cupti_version": pa.array([CUPTI_VERSION] * p.size, pa.string()),
        })
        return table, plan.fleet.gpu_host[g]

    def draw(self, h: int) -> Hour:
        """All four tables of hour ``h`` (hours after the start)."""
        hour = self.start + dt.timedelta(hours=h)
        hour_us = int(round(hour.timestamp() * 1_000_000))
        kt, kh, busy, per_class, krec = self._kernels(h, hour_us)
        mt, mh, rx, tx, mrec = self._memcpy(h, hour_us)
        dt_, dh = self._device(h, hour_us, busy, per_class, rx, tx)
        ht, hh = self._health(h, hour_us, krec + mrec)
        return Hour({"kernels": kt, "memcpy": mt, "device": dt_, "health": ht},
                    {"kernels": kh, "memcpy": mh, "device": dh, "health": hh})


def host_slices(hosts: np.ndarray, n_hosts: int) -> list[tuple[int, int, int]]:
    """(host, offset, length) of each host's contiguous rows (rows are ordered by host)."""
    bounds = np.searchsorted(hosts, np.arange(n_hosts + 1))
    return [(i, int(bounds[i]), int(bounds[i + 1] - bounds[i])) for i in range(n_hosts) if bounds[i + 1] > bounds[i]]

