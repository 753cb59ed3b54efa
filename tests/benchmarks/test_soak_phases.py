"""benchmarks/soak.py phases: records traced per on-phase against the steps finished inside it."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import soak  # benchmarks/ (tests/benchmarks/conftest.py), as the script imports its siblings
from step_log import StepLog

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("copies_per_step", [0.0, 1.5])
def test_an_on_phase_that_lost_nothing_reads_one_with_copies_counted(tmp_path, copies_per_step):
    """The duty log counts every record kind, so the expectation is kernels and copies per step (an LM
    step also copies: before, its phases read (296 + 38) / 296 = 1.13 with nothing lost)."""
    train = tmp_path / "lm.json"
    times = 1_000.0 + np.arange(40_000) * 0.01  # 100 steps a second for 400 s
    with StepLog(soak.steps_file(str(train))) as log:
        for t in times:
            log.append(float(t))
    train.write_text(json.dumps({"workload": "lm"}))
    kps = tmp_path / "kps.json"
    kps.write_text(json.dumps({"kernels_per_step": 4.0, "copies_per_step": copies_per_step}))
    rows = []
    for on_at, lost in ((1_150.0, 0), (1_250.0, 0), (1_350.0, 20)):  # 2-s on-phases after the 120-s start-up
        off_at = on_at + 2.0
        n = int(np.searchsorted(times, off_at) - np.searchsorted(times, on_at))
        rows.append([off_at, 2.0, n * (4.0 + copies_per_step) - lost, 0.01])
    duty = tmp_path / "duty.json"
    duty.write_text(json.dumps({"fields": ["off_at", "on_s", "records", "f_on"], "rows": rows}))

    res = soak.phases(str(train), str(duty), str(kps))
    assert res["on_phases"] == 3 and res["records_per_step"] == 4.0 + copies_per_step
    assert res["copies_counted"] is True
    per_step = 4.0 + copies_per_step
    assert res["per_phase_ratio_max"] == pytest.approx(1.0)
    assert res["per_phase_ratio_min"] == pytest.approx(1 - 20 / (200 * per_step))  # the lossy phase shows
    assert res["traced_over_expected"] == pytest.approx(1 - 20 / (600 * per_step))
    kps.write_text(json.dumps({"kernels_per_step": 4.0}))  # a count from before copies were counted
    older = soak.phases(str(train), str(duty), str(kps))
    assert older["copies_counted"] is False and older["records_per_step"] == 4.0


def test_gpu_memory_follows_one_pid_through_nvidia_smi_samples(tmp_path):
    """gpu_soak.sh's gpumem.csv interleaves every process on the GPU; a pid's series is its own."""
    csv = tmp_path / "gpumem.csv"
    rows = []
    for k, (a, b) in enumerate([(1294, 612), (1294, 612), (1296, 612), (1296, 614), (1298, 614)]):
        rows += [f"792, {a} MiB", f"793, {b} MiB"] + (["[Insufficient Permissions]"] if k == 2 else [])
    csv.write_text("\n".join(rows) + "\n")
    g = soak.gpu_memory(str(csv), 792)
    assert (g["samples"], g["first_mib"], g["last_mib"], g["growth_mib"]) == (5, 1294, 1298, 4)
    assert g["changes_at_s_mib"] == [(30.0, 2), (60.0, 2)]
    assert soak.gpu_memory(str(csv), 793)["changes_at_s_mib"] == [(45.0, 2)]
    with pytest.raises(ValueError, match="no GPU memory samples of pid 1"):
        soak.gpu_memory(str(csv), 1)


# A real soak: the LM loop under `cudawatch collect` for 900 s on an H100 (docs/benchmarks.md §20), its
# step times, duty log and torch.profiler count, and nvidia-smi's GPU memory of every process on the GPU.
S20 = Path(__file__).resolve().parents[1] / "data" / "cupti" / "bench" / "session_20261207e_h100"


def test_the_h100_soaks_lm_phases_read_one_once_copies_are_counted():
    res = soak.phases(str(S20 / "lm.json"), str(S20 / "duty_lm.json"), str(S20 / "kps_lm.json"))
    assert res["on_phases"] == 26 and res["records_per_step"] == pytest.approx(296 + 1142 / 30)
    assert res["traced_over_expected"] == pytest.approx(0.998, abs=0.001)  # kernels alone read 1.127
    assert 0.96 < res["per_phase_ratio_min"] <= res["per_phase_ratio_max"] < 1.02


def test_the_h100_soaks_gpu_memory_grows_in_the_traced_processes_only():
    csv = str(S20 / "gpumem.csv")  # pids: 792 the traced LM, 793 the traced launch loop, 649 the LM alone
    for pid in (792, 793):
        g = soak.gpu_memory(csv, pid)
        assert g["growth_mib"] == 16 and [d for _, d in g["changes_at_s_mib"]] == [2] * 8
    assert soak.gpu_memory(csv, 649)["growth_mib"] == 0 and soak.gpu_memory(csv, 649)["changes_at_s_mib"] == []


def test_gpumem_reports_every_file_and_fails_for_one_without_a_pid(tmp_path):
    with_pid = tmp_path / "lm_traced.json"
    with_pid.write_text(json.dumps({"workload": "lm", "pid": 792}))
    p = subprocess.run([sys.executable, "benchmarks/soak.py", "gpumem", "--gpumem", str(S20 / "gpumem.csv"),
                        "--train", str(S20 / "lm.json"), str(tmp_path / "missing.json"), str(with_pid)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)  # §20's lm.json predates the pid
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert "error: no pid recorded" in lines[0] and json.loads(lines[2].split(" ", 1)[1])["growth_mib"] == 16
    assert "missing.json error:" in lines[1]  # a missing file is reported and hides nothing after it
    assert soak.gpu_memory(soak.read_gpumem(str(S20 / "gpumem.csv")), 792) == soak.gpu_memory(str(S20 / "gpumem.csv"), 792)


# §21: six LM processes at once for 600 s on an H100, each a different way to pause (docs/benchmarks.md).
S21 = S20.parent / "session_20261207f_h100" / "tail"


def test_gpu_memory_grows_per_finalize_cycle_and_not_with_one_attach():
    csv = str(S21 / "gpumem.csv")
    pid = {n: json.loads((S21 / f"lm_{n}.json").read_text())["pid"]
           for n in ("none", "default", "off-mode-disable", "period-s-120", "arena-2", "mmap-1m")}
    growth = {n: soak.gpu_memory(csv, p)["growth_mib"] for n, p in pid.items()}
    assert growth["none"] == growth["off-mode-disable"] == 0  # no cuptiFinalize cycles: flat
    assert growth["default"] == growth["arena-2"] == growth["mmap-1m"] == 12  # 20 cycles; malloc settings change nothing
    assert 0 < growth["period-s-120"] < growth["default"]  # 5 cycles


def test_the_step_log_windows_are_the_collectors():
    assert soak.collector_window_s({}) == 60
    assert soak.collector_window_s({"CUDAWATCH_PERIOD_S": "120"}) == 120  # the collector lengthens its windows
    assert soak.collector_window_s({"CUDAWATCH_WINDOW_S": "10"}) == 10


# §22: six LMs at once for 360 s on an H100: periods of 30, 120 and 300 s with 8-MiB, 1-MiB and 256-KiB host buffers.
S22 = S20.parent / "session_20261207g_h100"


def test_fewer_cycles_keep_less_gpu_memory_and_every_window_follows_the_period_and_is_traced():
    from cudawatch.shards import list_shards, read_shard

    gm = S22 / "gm"
    runs = {"p30-8m": 60, "p30-1m": 60, "p120-8m": 120, "p120-1m": 120, "p120-256k": 120, "p300-1m": 300}
    samples = soak.read_gpumem(str(gm / "gpumem.csv"))
    growth = {v: soak.gpu_memory(samples, json.loads((gm / f"lm_{v}.json").read_text())["pid"])["growth_mib"] for v in runs}
    assert growth["p30-8m"] == growth["p30-1m"] == 8 and max(growth[v] for v in ("p120-8m", "p120-1m", "p120-256k", "p300-1m")) <= 4
    for v, window_s in runs.items():
        health = [r for f in list_shards(gm / f"shards_{v}", "health") for r in read_shard(f).to_pylist()]
        assert {r["window_s"] for r in health} == {window_s}  # the windows follow the period
        assert all(r["sampling_duty"] > 0 for r in health)  # and every one of them was traced
        assert sum(r["dropped_records"] for r in health) == 0
        assert sum(r["records_valid"] for r in health) == sum(r["records_delivered"] for r in health) > 60_000


def test_smaller_host_buffers_lower_the_rss_of_a_fully_traced_loop_and_the_peak_of_a_large_on_phase():
    hb = {v: json.loads((S22 / f"hb_{v}.json").read_text()) for v in (8192, 1024, 256)}
    assert all(r["dropped"] == 0 and r["invalid_zero_timestamp"] == 0 and r["records_delivered"] > 900_000 for r in hb.values())
    g = {v: r["rss_growth_after_warmup_mib"] for v, r in hb.items()}
    assert g[8192] > 4 * g[1024] > 4 * g[256] * 0.75 and round(g[8192]) == 105 and round(g[1024]) == 24
    peaks = {}
    for v in ("p120-8m", "p120-1m", "p120-256k"):
        rss = json.loads((S22 / "gm" / f"lm_{v}.json").read_text())["rss"]
        at = {round(t): m for t, m in rss}
        assert at[230] - at[225] > 10 and at[235] - at[225] < 4  # the ~96 k-record on-phase: its peak, given back 5 s later
        peaks[v] = at[355] - at[340]  # the ~160 k-record on-phase, caught by the last sample
    assert peaks["p120-8m"] > peaks["p120-1m"] > peaks["p120-256k"] > 10


# §23: the 15-minute soak at the 1-MiB default host buffer (both loops under `cudawatch collect`), and
# beside it the LM under the collector with a 60-s and a 120-s period, on one H100 (docs/benchmarks.md).
S23 = S20.parent / "session_20261207h_h100"


@pytest.mark.parametrize("loop, growth_mib, records", [("lm", 19.3, 859_005), ("launch", 7.6, 1_120_634)])
def test_the_default_soak_stays_inside_32_mib_and_loses_nothing(loop, growth_mib, records):
    res = soak.analyze(str(S23 / "sk" / "shards"), str(S23 / "sk" / f"{loop}.json"), str(S23 / "sk" / f"kps_{loop}.json"), f"soak-{loop}")
    assert res["rss_growth_after_2min_mib"] == pytest.approx(growth_mib, abs=0.05) and growth_mib <= 32  # the bound
    assert res["full_windows"] == 14 and {w["data_quality"] for w in res["windows"]} == {"ok"}
    assert sum(w["records_delivered"] for w in res["windows"]) == sum(w["records_valid"] for w in res["windows"]) == records
    assert sum(w["dropped"] + w["invalid_zero_timestamp"] for w in res["windows"]) == 0
    assert (S23 / "sk" / f"{loop}.rc").read_text().strip() == "0"


def _window_writes(train: dict, duty_log: dict, window_s: int, n: int = 2) -> list[float]:
    """When the collector wrote its first ``n`` windows, in seconds from the program's start: the spool
    writes a window a grace after it ends (``collector.spool.grace_s`` of the period then in force: the
    duty log's ``period_s``, which is 30 s until an on-phase has traced something), at the end of an on-phase."""
    from collector.spool import grace_s

    at = duty_log["fields"].index("period_s")
    rows = [(r[0], r[at]) for r in duty_log["rows"]]
    end = math.ceil(rows[0][0] / window_s) * window_s
    return [next(o for o, period in rows if o >= end + k * window_s + grace_s(period)) - train["t0"] for k in range(n)]


def _growth_away_from(rss, times, after_s=120.0, margin_s=5.0) -> float:
    """RSS growth after ``after_s`` over the samples that do not reach within ``margin_s`` of ``times``."""
    return sum(b[1] - a[1] for a, b in zip(rss, rss[1:])
               if a[0] >= after_s and not any(a[0] - margin_s <= t <= b[0] + margin_s for t in times))


def test_window_writes_follow_the_period_in_force_at_each_on_phase():
    """60-s windows, a period of 30 s until the on-phase at 160 s traced something, 120 s after
    (control.py). The window ending at 60 s is written at 130 s (2 x 30 + 1 s after its end, a 30-s
    on-phase); the one ending at 120 s at 400 s (241 s after, a 120-s on-phase), not at 280 s as one
    30-s period for the run would say, nor the first at 400 s as one 120-s period would."""
    fields = ["off_at", "duty", "f_on", "on_s", "cost_s", "cycle_s", "period_s", "records", "drain_wait_s", "zero_ts"]
    ons = [(10, 30), (40, 30), (70, 30), (100, 30), (130, 30), (160, 30), (280, 120), (400, 120), (520, 120)]
    rows = [[off, 0.01, 0.0, 0.3, 0.0, 0.02, period, 1000 if off >= 160 else 0, 0.01, 0] for off, period in ons]
    assert _window_writes({"t0": 0.0}, {"fields": fields, "rows": rows}, 60) == [130, 400]


def test_a_longer_period_keeps_less_gpu_memory_and_its_rss_steps_are_its_first_window_writes():
    samples = soak.read_gpumem(str(S23 / "sk" / "gpumem.csv"))
    runs = {30: ("sk/lm.json", "sk/duty_lm.json", 60), 60: ("pp/lm_p60.json", "pp/duty_p60.json", 60),
            120: ("pp/lm_p120.json", "pp/duty_p120.json", 120)}
    train = {p: json.loads((S23 / f).read_text()) for p, (f, _, _) in runs.items()}
    gpu = {p: soak.gpu_memory(samples, train[p]["pid"]) for p in runs}
    assert [gpu[p]["growth_mib"] for p in (30, 60, 120)] == [16, 10, 6]  # 2 MiB about every 4 cuptiFinalize cycles
    assert all({d for _, d in g["changes_at_s_mib"]} == {2} for g in gpu.values())
    writes = {p: _window_writes(train[p], json.loads((S23 / d).read_text()), w) for p, (_, d, w) in runs.items()}
    assert [round(t) for t in writes[30]] == [113, 173] and [round(t) for t in writes[60]] == [173, 232]
    assert [round(t) for t in writes[120]] == [355, 475]  # at 60 and 120 s after the 2-minute mark, at 30 s before
    growth = {p: soak.growth_after_2min(train[p]["rss"])[0] for p in runs}
    assert growth[30] < 32 < growth[120] < growth[60]  # as read, the longer periods miss the bound ...
    away = {p: _growth_away_from(train[p]["rss"], writes[p]) for p in runs}
    assert max(away[60], away[120]) < 10 < away[30] < 32  # ... but only by their first writes (§23)


@pytest.mark.parametrize("period", [60, 120])
def test_the_windows_follow_a_longer_period_and_every_on_phase_lost_nothing(period):
    from cudawatch.shards import list_shards, read_shard

    health = [r for f in list_shards(S23 / "pp" / f"shards_p{period}", "health") for r in read_shard(f).to_pylist()]
    assert {r["window_s"] for r in health} == {period} and all(r["sampling_duty"] > 0 for r in health)
    assert sum(r["records_valid"] for r in health) == sum(r["records_delivered"] for r in health) > 900_000
    log = json.loads((S23 / "pp" / f"duty_p{period}.json").read_text())
    rows = [dict(zip(log["fields"], r)) for r in log["rows"]]
    assert {r["period_s"] for r in rows} == {period} and sum(r["zero_ts"] for r in rows) == 0
