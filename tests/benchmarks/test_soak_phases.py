"""benchmarks/soak.py phases: records traced per on-phase against the steps finished inside it."""

import json

import numpy as np
import pytest

from benchmarks import soak
from benchmarks.step_log import StepLog


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
    per_step = 4.0 + copies_per_step
    assert res["per_phase_ratio_max"] == pytest.approx(1.0)
    assert res["per_phase_ratio_min"] == pytest.approx(1 - 20 / (200 * per_step))  # the lossy phase shows
    assert res["traced_over_expected"] == pytest.approx(1 - 20 / (600 * per_step))


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
