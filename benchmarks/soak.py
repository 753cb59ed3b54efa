"""Soak: real training loops under ``cudawatch collect`` with default settings, for as long as given.

  python benchmarks/soak.py count --workload lm --steps 50 --json kps_lm.json     (kernels per step, torch.profiler)
  cudawatch collect --job soak-lm --out shards -- python benchmarks/soak.py train --workload lm --seconds 900 --json lm.json
  python benchmarks/soak.py analyze --shards shards --train lm.json --kps kps_lm.json [--job soak-lm]
  python benchmarks/soak.py phases --train lm.json --duty-log duty_lm.json --kps kps_lm.json
  python benchmarks/soak.py gpumem --gpumem gpumem.csv --train lm.json launch.json lm_none.json

Workloads: ``lm`` = a small transformer language model (4 layers, d=256, 4 heads, sequence 128,
batch 16, vocabulary 8192; AdamW, bf16 autocast); ``launch`` = the launch-bound loop of
``benchmarks/overhead.py`` (100 tiny in-place adds then sync: exactly 100 kernels per step).

``train`` logs the steps finished in every window (aligned like the collector's windows) and the
process RSS every 5 s, with its threads, anonymous RSS and mappings (``proc``; the collector runs
inside this process), and ``smaps_growth``: the memory regions whose RSS changed from 245 s to its end
(``gpu_workloads.smaps_census``); the step times go to ``<json>.steps.f64`` as they come (``step_log.StepLog``). ``count`` counts kernels per step
once with torch.profiler (CUDA activities), in a process of its own. ``analyze`` compares, per
window, the traced launches scaled by ``1 / sampling_duty`` with steps x kernels per step, and
reports the RSS growth after the first 2 minutes. ``phases`` (with the collector's
``CUDAWATCH_DUTY_LOG``) compares each on-phase's traced records with the steps finished inside it,
and the step rate inside on-phases with the rate outside them (the real slowdown while tracing).
``gpumem`` reads each train JSON's process (``pid``) out of ``gpu_soak.sh``'s ``gpumem.csv``: GPU memory,
which holds what CUPTI and the driver keep on the device and which no RSS figure shows.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import gpu_workloads  # benchmarks/, the script's folder
from step_log import TAIL_FROM_S, StepLog, growth_after_2min, read_steps


def make_step(workload: str):
    import torch
    from torch import nn

    dev = torch.device("cuda")
    torch.manual_seed(0)
    if workload == "launch":
        return gpu_workloads.launch_step()
    if workload != "lm":
        raise SystemExit(f"unknown workload {workload!r} (lm, launch)")
    vocab, d, seq, batch = 8192, 256, 128, 16

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(seq, d))
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

        def forward(self, idx):
            h = self.emb(idx) + self.pos
            return self.head(self.blocks(h, mask=self.mask, is_causal=True))

    model = LM().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (8, batch, seq + 1), device=dev)
    state = {"i": 0}

    def step():
        i = state["i"]
        tok = data[i % 8]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tok[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab).float(), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["i"] = i + 1
        if i % 20 == 0:
            loss.item()

    return step


#: When ``train`` takes its first census of resident memory by region (``gpu_workloads.smaps_census``;
#: the last is at the end): the start of the soaks' slope span.
SMAPS_FROM_S = TAIL_FROM_S


def collector_window_s(environ: dict | None = None) -> int:
    """The window length the collector beside this run uses (``CUDAWATCH_WINDOW_S``, or lengthened
    by a ``CUDAWATCH_PERIOD_S`` above 60 s), so the step log's windows are the shards' windows."""
    from cudawatch.config import CollectorTiming

    return CollectorTiming.from_env(environ=environ).window_s


def train(workload: str, seconds: float, window_s: int, out: str) -> dict:
    import torch

    step = make_step(workload)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    per_window: dict[int, int] = {}
    rss: list[tuple[float, float]] = []
    proc: list[tuple[float, int, float, int]] = []  # (t, threads, anonymous RSS MiB, mappings): what grows
    smaps: dict = {}  # {"from_s", "first"}: where RSS grows after SMAPS_FROM_S, diffed at the end
    t0 = time.time()
    stop = threading.Event()

    def sampler():
        while not stop.wait(5.0):
            t = round(time.time() - t0, 1)
            threads, anon, maps = gpu_workloads.proc_census()
            rss.append((t, round(gpu_workloads.rss_mib(), 1)))
            proc.append((t, threads, round(anon, 1), maps))
            if t >= SMAPS_FROM_S and not smaps:
                smaps.update(from_s=t, first=gpu_workloads.smaps_census())

    threading.Thread(target=sampler, daemon=True).start()
    steps, end = 0, time.perf_counter() + seconds
    last_dump = time.time()
    with StepLog(steps_file(out)) as step_times:  # unix time each step finished (for ``phases``), on disk
        while time.perf_counter() < end:
            step()
            now = time.time()
            step_times.append(now)
            ws = int(now // window_s * window_s)
            per_window[ws] = per_window.get(ws, 0) + 1
            steps += 1
            if now - last_dump > 30:
                _dump(out, workload, window_s, t0, steps, per_window, rss, proc, done=False)
                last_dump = now
    torch.cuda.synchronize()
    stop.set()
    growth = None
    if smaps:
        growth = {"from_s": smaps["from_s"], "to_s": round(time.time() - t0, 1),
                  "regions": gpu_workloads.smaps_growth(smaps["first"], gpu_workloads.smaps_census())}
    return _dump(out, workload, window_s, t0, steps, per_window, rss, proc, done=True, smaps_growth=growth)


def steps_file(train_json: str) -> Path:
    return Path(train_json).with_suffix(".steps.f64")


def _dump(out, workload, window_s, t0, steps, per_window, rss, proc, *, done, smaps_growth=None) -> dict:
    res = {"workload": workload, "pid": os.getpid(), "window_s": window_s, "t0": t0, "steps": steps, "done": done,
           "step_log": "streamed",  # step times on disk (step_log.StepLog), not in this process's RSS
           "steps_per_window": {str(k): v for k, v in sorted(per_window.items())}, "rss": list(rss),
           "proc": list(proc), "smaps_growth": smaps_growth}
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res))
    os.replace(tmp, out)
    return res


def count(workload: str, steps: int, out: str | None) -> dict:
    import torch

    step = make_step(workload)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kinds: dict[str, int] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            cat = "kernel"
            name = e.name.lower()
            if "memcpy" in name or "memset" in name:
                cat = "copy"
            kinds[cat] = kinds.get(cat, 0) + 1
    res = {"workload": workload, "steps": steps, "events": kinds, "kernels_per_step": kinds.get("kernel", 0) / steps,
           "copies_per_step": kinds.get("copy", 0) / steps}
    if out:
        Path(out).write_text(json.dumps(res))
    return res


def analyze(shards: str, train_json: str, kps_json: str, job: str | None) -> dict:
    import pyarrow as pa

    from cudawatch.shards import list_shards, read_shard

    tr = json.loads(Path(train_json).read_text())
    kps = json.loads(Path(kps_json).read_text())["kernels_per_step"]
    ks = pa.concat_tables([read_shard(f) for f in list_shards(shards, "kernels")]).to_pylist()
    hs = pa.concat_tables([read_shard(f) for f in list_shards(shards, "health")]).to_pylist()
    if job:
        ks = [r for r in ks if r["job"] == job]
        hs = [r for r in hs if r["job"] == job]
    launches: dict[int, int] = {}
    duty: dict[int, float] = {}
    for r in ks:
        ws = int(r["window_start"].timestamp())
        launches[ws] = launches.get(ws, 0) + r["launches"]
        duty[ws] = r["sampling_duty"]
    health = {int(r["window_start"].timestamp()): r for r in hs}
    rows = []
    t0 = tr["t0"]
    for ws_s, n in tr["steps_per_window"].items():
        ws = int(ws_s)
        h = health.get(ws, {})
        full = ws >= t0 and ws + tr["window_s"] <= t0 + max(float(p[0]) for p in tr["rss"]) if tr["rss"] else False
        d = duty.get(ws) or h.get("sampling_duty")
        expected = n * kps
        est = launches.get(ws, 0) / d if d else None
        rows.append({"window_start": ws, "full_window": full, "steps": n, "expected_kernels": expected,
                     "traced_launches": launches.get(ws, 0), "sampling_duty": d,
                     "scaled": est, "ratio": (est / expected) if (est is not None and expected) else None,
                     "records_delivered": h.get("records_delivered"), "records_valid": h.get("records_valid"),
                     "invalid_zero_timestamp": h.get("invalid_zero_timestamp"), "dropped": h.get("dropped_records"),
                     "data_quality": h.get("data_quality"), "overhead_pct": h.get("overhead_pct")})
    rss = tr["rss"]
    after = [v for t, v in rss if t >= 120]
    growth, max_growth = growth_after_2min(rss) or (None, None)
    full_rows = [r for r in rows if r["full_window"] and r["ratio"] is not None]
    res = {"workload": tr["workload"], "steps": tr["steps"], "kernels_per_step": kps,
           "rss_first_mib": rss[0][1] if rss else None, "rss_at_120s_mib": after[0] if after else None,
           "rss_end_mib": rss[-1][1] if rss else None,
           "rss_growth_after_2min_mib": growth, "rss_max_after_2min_mib": max_growth,
           "full_windows": len(full_rows),
           "worst_ratio_error_pct": max((abs(r["ratio"] - 1) * 100 for r in full_rows), default=None),
           "windows": rows}
    return res


def phases(train_json: str, duty_log: str, kps_json: str, skip_s: float = 120.0) -> dict:
    """Per on-phase of the collector (``CUDAWATCH_DUTY_LOG``): records traced against steps finished
    inside it x records per step (kernels and copies, as torch.profiler counted them: the log counts
    every record kind; are records lost?), and the program's step rate inside on-phases
    against the rate outside them (what tracing really slowed the program, next to the collector's
    own estimate ``f_on``)."""
    times = read_steps(steps_file(train_json))
    counted = json.loads(Path(kps_json).read_text())
    copies = counted.get("copies_per_step")  # counts before 2026-12-07 have kernels only: said so in the result
    rps = counted["kernels_per_step"] + (copies or 0.0)
    log = json.loads(Path(duty_log).read_text())
    fields = log["fields"]
    rows = [dict(zip(fields, r)) for r in log["rows"]]
    lo, hi = times[0] + skip_s, times[-1]  # after the start-up (2 minutes by default), inside the timed loop
    on_steps = on_time = traced = expected = 0.0
    per_phase, f_on = [], []
    for r in rows:
        a, b = r["off_at"] - r["on_s"], r["off_at"]
        if a < lo or b > hi or r["on_s"] <= 0:
            continue
        n = int(times.searchsorted(b) - times.searchsorted(a))
        on_steps += n
        on_time += b - a
        traced += r["records"]
        expected += n * rps
        f_on.append(r["f_on"])
        per_phase.append(r["records"] / (n * rps) if n else None)
    total = int(times.searchsorted(hi) - times.searchsorted(lo))
    off_steps, off_time = total - on_steps, (hi - lo) - on_time
    rate_on = on_steps / on_time if on_time else None
    rate_off = off_steps / off_time if off_time else None
    slowdown = (rate_off / rate_on - 1) if rate_on and rate_off else None
    work_duty = on_steps / total if total else None
    return {"on_phases": len(per_phase), "on_time_s": on_time, "wall_duty": on_time / (hi - lo),
            "work_duty": work_duty, "traced_records": traced, "records_per_step": rps, "copies_counted": copies is not None,
            "expected_records_in_on_phases": expected,
            "traced_over_expected": traced / expected if expected else None,
            "per_phase_ratio_min": min((x for x in per_phase if x is not None), default=None),
            "per_phase_ratio_max": max((x for x in per_phase if x is not None), default=None),
            "steps_per_s_on": rate_on, "steps_per_s_off": rate_off, "measured_slowdown_while_on": slowdown,
            "estimated_slowdown_while_on_mean": sum(f_on) / len(f_on) if f_on else None,
            # per pause: the detach's drain wait and the records it left without timestamps (logs since 2026-12-06)
            "drain_wait_s_and_zero_ts": [(r["drain_wait_s"], r["zero_ts"]) for r in rows if "zero_ts" in r]}


def read_gpumem(gpumem_csv: str) -> dict[int, list[int]]:
    """``gpu_soak.sh``'s nvidia-smi samples (``nvidia-smi --query-compute-apps=pid,used_memory -l 15``: one
    ``pid, N MiB`` line per process per sample, no timestamps): each pid's MiB values in order."""
    return parse_gpumem(Path(gpumem_csv).read_text())


def parse_gpumem(text: str) -> dict[int, list[int]]:
    """``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader`` output (one sample or
    many): each pid's MiB values in order; lines that are not ``pid, N MiB`` (``[N/A]``) are skipped."""
    series: dict[int, list[int]] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit() and fields[1].endswith("MiB"):
            series.setdefault(int(fields[0]), []).append(int(fields[1].split()[0]))
    return series


def gpu_memory(gpumem: str | dict, pid: int, sample_s: float = 15.0) -> dict:
    """GPU memory of process ``pid`` in ``gpu_soak.sh``'s samples (the CSV's path, or ``read_gpumem``'s
    result; a change's time is k x ``sample_s`` for the pid's k-th sample, counted from its first, not
    from the run's start): first and last value, and each change with its time. CUPTI's device buffers
    and whatever the driver keeps for it are here and nowhere in the RSS."""
    series = (read_gpumem(gpumem) if isinstance(gpumem, str) else gpumem).get(pid)
    if not series:
        raise ValueError(f"no GPU memory samples of pid {pid}" + (f" in {gpumem}" if isinstance(gpumem, str) else ""))
    steps = [(k * sample_s, series[k] - series[k - 1]) for k in range(1, len(series)) if series[k] != series[k - 1]]
    return {"pid": pid, "samples": len(series), "first_mib": series[0], "last_mib": series[-1],
            "growth_mib": series[-1] - series[0], "changes_at_s_mib": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--workload", default="lm")
    t.add_argument("--seconds", type=float, default=900)
    t.add_argument("--window-s", type=int, default=None, help="step-log window (default: the collector's, from the environment)")
    t.add_argument("--json", required=True)
    c = sub.add_parser("count")
    c.add_argument("--workload", default="lm")
    c.add_argument("--steps", type=int, default=50)
    c.add_argument("--json")
    a_ = sub.add_parser("analyze")
    a_.add_argument("--shards", required=True)
    a_.add_argument("--train", required=True)
    a_.add_argument("--kps", required=True)
    a_.add_argument("--job")
    a_.add_argument("--json")
    p_ = sub.add_parser("phases")
    p_.add_argument("--train", required=True)
    p_.add_argument("--duty-log", required=True)
    p_.add_argument("--kps", required=True)
    p_.add_argument("--skip-s", type=float, default=120.0)
    p_.add_argument("--json")
    g_ = sub.add_parser("gpumem")
    g_.add_argument("--gpumem", required=True, help="gpu_soak.sh's gpumem.csv")
    g_.add_argument("--train", nargs="+", required=True, help="train JSONs (their pid)")
    a = ap.parse_args()
    if a.cmd == "gpumem":
        failed = 0
        samples = read_gpumem(a.gpumem)  # once for every file; a missing CSV is the command's error
        for t in a.train:  # every file is reported; one missing, unreadable, without a pid or samples hides no other
            try:
                tr = json.loads(Path(t).read_text())
                if "pid" not in tr:
                    raise ValueError("no pid recorded (written before soak.py recorded one)")
                print(t, json.dumps(gpu_memory(samples, tr["pid"])))
            except (OSError, ValueError) as exc:
                print(t, f"error: {exc}")
                failed += 1
        raise SystemExit(1 if failed else 0)
    if a.cmd == "phases":
        res = phases(a.train, a.duty_log, a.kps, a.skip_s)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        print(json.dumps(res, indent=1))
    elif a.cmd == "train":
        res = train(a.workload, a.seconds, a.window_s or collector_window_s(), a.json)
        print(json.dumps({k: v for k, v in res.items() if k not in ("steps_per_window", "rss")}))
    elif a.cmd == "count":
        print(json.dumps(count(a.workload, a.steps, a.json)))
    else:
        res = analyze(a.shards, a.train, a.kps, a.job)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        print(json.dumps({k: v for k, v in res.items() if k != "windows"}, indent=1))


if __name__ == "__main__":
    main()
