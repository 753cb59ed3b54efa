"""The GPU workloads and probes the collector benchmarks share (overhead, memory, soak, cupti_diag).

Each builder returns a ``step()`` that runs one training or launch step on the current CUDA
device; torch is imported inside, so the scripts' CPU paths (argument parsing, summaries) run
without it. Scripts run as ``python benchmarks/<name>.py``, so this module is importable as
``gpu_workloads`` from their folder.
"""

from __future__ import annotations

import os
import time


def rss_mib() -> float:
    """Resident set size of this process in MiB."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def proc_census() -> tuple[int, float, int]:
    """(threads, anonymous RSS in MiB, memory mappings) of this process, from /proc (Linux).

    Tells apart what a detach/attach cycle may leave behind: threads CUPTI did not join, heap or
    allocator arenas (anonymous memory; a new glibc arena is a new mapping), libraries (file-backed)."""
    threads = anon_kib = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("RssAnon:"):
                anon_kib = int(line.split()[1])
    with open("/proc/self/maps") as fh:
        maps = sum(1 for _ in fh)
    return threads, anon_kib / 1024, maps


def smaps_census(path: str = "/proc/self/smaps") -> dict[str, dict[str, int]]:
    """Resident memory of this process by region (Linux): ``{region: {"rss_kib", "mappings"}}``.

    A file-backed mapping counts under its file's name (a library's pages, e.g. ``libcupti.so.13``),
    ``[heap]`` (the main ``malloc`` arena), ``[stack]`` and the like under theirs, and every anonymous
    mapping under ``[anon]``: other threads' ``malloc`` arenas, large ``malloc``s, thread stacks and
    other allocators' memory (pyarrow's, CUDA's) alike (one key, because the kernel merges and splits
    anonymous mappings as they grow, so no finer key stays stable between two censuses). An anonymous
    mapping its owner named (``[anon:glibc: malloc arena]``, kernels since 5.17 with ``PR_SET_VMA``)
    counts under that name, like ``[heap]``. Two censuses diffed (``smaps_growth``) say in which kind
    of region RSS grew."""
    out: dict[str, dict[str, int]] = {}
    name = None
    with open(path) as fh:
        for line in fh:
            head = line.split(maxsplit=5)
            if not head:
                continue
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                if len(head) == 6:
                    where = head[5].strip()
                    name = where if where.startswith("[") else os.path.basename(where.split(" (deleted)")[0])
                else:
                    name = "[anon]"
                entry = out.setdefault(name, {"rss_kib": 0, "mappings": 0})
                entry["mappings"] += 1
            elif head[0] == "Rss:" and name is not None:
                out[name]["rss_kib"] += int(head[1])
    return out


def smaps_growth(first: dict, last: dict, top: int = 12) -> list[dict]:
    """The ``top`` regions of two ``smaps_census`` results whose RSS changed most (by size of change)."""
    rows = []
    for name in first.keys() | last.keys():
        a, b = first.get(name, {"rss_kib": 0, "mappings": 0}), last.get(name, {"rss_kib": 0, "mappings": 0})
        if a != b:
            rows.append({"region": name, "rss_kib_diff": b["rss_kib"] - a["rss_kib"], "rss_kib": b["rss_kib"],
                         "mappings_diff": b["mappings"] - a["mappings"]})
    return sorted(rows, key=lambda r: -abs(r["rss_kib_diff"]))[:top]


def pin_duty(session, duty: float) -> None:
    """Hold a running collector session's traced fraction at ``duty`` (benchmarks only): the
    controller keeps it whatever its estimate says, so every period cycles (``duty`` < 1) or, from
    the period after the current one, CUPTI stays attached (``duty`` = 1)."""
    ctl = session.controller
    ctl.duty = duty
    ctl.update = lambda est: ctl.duty


def launch_step(launches: int = 100):
    """The launch-bound loop: ``launches`` tiny in-place adds, then a synchronize."""
    import torch

    x = torch.zeros(16, device=torch.device("cuda"))

    def step():
        for _ in range(launches):
            x.add_(1.0)
        torch.cuda.synchronize()

    return step


def launch_rate(step, seconds: float, launches: int = 100) -> float:
    """Kernel launches per second of ``launch_step(launches)`` over ``seconds`` of wall time."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += launches
    return n / (time.perf_counter() - t0)


def cnn_step(log_every: int = 0):
    """A small real training step: conv net on synthetic 32x32 images, AdamW, bf16 autocast."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xs = torch.randn(8, 128, 3, 32, 32).pin_memory()
    ys = torch.randint(0, 10, (8, 128)).pin_memory()
    state = {"i": 0}

    def step():
        i = state["i"]
        x = xs[i % 8].to(dev, non_blocking=True)
        y = ys[i % 8].to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["i"] = i = i + 1
        if i % 50 == 0:
            loss.item()
        if log_every and i % log_every == 0:
            print(f"step {i} loss {loss.item():.4f}", flush=True)

    return step
