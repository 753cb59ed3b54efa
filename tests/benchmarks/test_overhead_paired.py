"""benchmarks/overhead_paired.py: the within-process design cancels a baseline that moves between
processes, and says when the process is not back to its baseline after the stop."""

import random
import statistics

import pytest

import overhead_paired as paired


def _runs(true_ratio: float, after_stop: float, n: int, seed: int, mode: str = "cudawatch") -> list[dict]:
    """Processes whose untraced baseline moves +-20 % between them, with 0.3 % noise inside one."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = 1e-3 * rng.uniform(0.8, 1.2)
        noise = lambda: 1 + rng.gauss(0, 0.003)  # noqa: E731
        out.append({"mode": mode, "rep": i, "results": {"launch": {
            "a1_s_per_step": base * noise(), "b_s_per_step": base * true_ratio * noise(),
            "a2_s_per_step": base * after_stop * noise()}}})
    return out


def test_a_baseline_moving_between_processes_cancels_inside_each():
    s = paired.summarize(_runs(1.02, 1.0, 12, seed=3))["launch"]["cudawatch"]
    assert s["processes"] == 12
    assert abs(s["ratio"] - 1.02) < 0.004
    lo, hi = s["ci95"]
    assert lo < 1.02 < hi and hi - lo < 0.01  # the baselines themselves span 0.8-1.2 ms


def test_not_back_to_baseline_after_the_stop_shows_in_after_stop():
    s = paired.summarize(_runs(1.02, 1.05, 10, seed=4))["launch"]["cudawatch"]
    assert abs(s["after_stop"] - 1.05) < 0.005
    assert abs(s["ratio_vs_a1"] - 1.02) < 0.005  # the comparison to read then
    assert s["ratio"] < 1.0  # against mean(A1, A2) a residual cost hides the overhead


def test_modes_are_summarized_apart_and_rendered():
    s = paired.summarize(_runs(1.01, 1.0, 4, seed=5) + _runs(1.6, 1.0, 4, seed=6, mode="profiler"))
    assert statistics.median(s["launch"]["profiler"]["ratios"]) > 1.5 > s["launch"]["cudawatch"]["ratio"]
    md = paired.markdown(s)
    assert "| launch | cudawatch | 4 |" in md and "| launch | profiler | 4 |" in md


def test_an_unknown_mode_is_refused_before_any_gpu_work():
    with pytest.raises(SystemExit, match="--mode must be one of"):
        paired.worker("none", "launch", 1.0, 0.0)


def test_the_baseline_is_read_where_b_ran_between_a1_and_a2():
    """A baseline drifting from 1.0 to 1.1 ms over the process, B late in it (a long stop after B):
    B is compared with the baseline at its own position, not with the mean of A1 and A2."""
    r = {"a1_s_per_step": 1.0e-3, "a2_s_per_step": 1.1e-3, "b_s_per_step": 1.09e-3 * 1.02, "b_position": 0.9}
    assert paired.per_process(r)["ratio"] == pytest.approx(1.02)
    assert paired.per_process(dict(r, b_position=0.5))["ratio"] == pytest.approx(1.09 * 1.02 / 1.05)


def test_workers_rotate_their_order_and_a_cut_run_keeps_its_finished_reps(tmp_path):
    """overhead.run_interleaved (both overhead scripts' driver) on a stand-in worker script: one
    process per mode and rep, the order rotating, every finished worker in the checkpoint, and a
    failing worker stops the run with its exit status."""
    import json

    import overhead

    script = tmp_path / "worker.py"
    script.write_text("import json, sys\nmode = sys.argv[sys.argv.index('--mode') + 1]\n"
                      "sys.exit(5) if mode == 'bad' else print(json.dumps({'mode': mode, 'results': {}, 'args': sys.argv[4:]}))\n")
    ck = tmp_path / "ck.json"
    runs = overhead.run_interleaved(str(script), 2, ["a", "b"], ["--x", "1"], lambda m, r: m, str(ck), {"seconds": 3})
    assert [(r["rep"], r["mode"]) for r in runs] == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]
    assert runs[0]["args"] == ["--x", "1"]
    saved = json.loads(ck.read_text())
    assert saved["runs"] == runs and saved["seconds"] == 3
    with pytest.raises(SystemExit, match="worker bad failed with 5"):
        overhead.run_interleaved(str(script), 1, ["a", "bad"], [], lambda m, r: m, str(ck))
    assert [r["mode"] for r in json.loads(ck.read_text())["runs"]] == ["a"]


def _cycled(a_ms: list[float], b_ms: list[float]) -> dict:
    """A worker result of the alternating layout, phases of 30 s back to back (B midway between its As)."""
    mids = [30.0 * i for i in range(len(a_ms) + len(b_ms))]
    return {"a_s_per_step": [x * 1e-3 for x in a_ms], "b_s_per_step": [x * 1e-3 for x in b_ms],
            "a_mid_s": mids[0::2], "b_mid_s": mids[1::2]}


def test_each_traced_phase_is_read_against_its_own_neighbours():
    """A process that speeds up fast at first and then slowly (1.00, 0.92, 0.91 ms untraced): each
    B is compared with the two A phases around it, so a 2 % overhead reads as 2 % in both cycles;
    against the first A it would read as a gain."""
    r = _cycled([1.00, 0.92, 0.91], [0.96 * 1.02, 0.915 * 1.02])
    p = paired.per_process(r)
    assert p["phase_ratios"] == pytest.approx([1.02, 1.02])
    assert p["ratio"] == pytest.approx(1.02)
    assert p["after_stop"] == pytest.approx(0.91)
    assert p["ratio_vs_a1"] < 1.0


def test_both_layouts_summarize_together():
    old = _runs(1.02, 1.0, 3, seed=7)
    new = [{"mode": "cudawatch", "rep": 3 + i, "results": {"launch": _cycled([1.0, 1.0, 1.0], [1.02, 1.02])}} for i in range(3)]
    s = paired.summarize(old + new)["launch"]["cudawatch"]
    assert s["processes"] == 6 and abs(s["ratio"] - 1.02) < 0.004


def test_zero_cycles_are_refused_before_any_gpu_work():
    with pytest.raises(SystemExit, match="--cycles must be at least 1"):
        paired.worker("cudawatch", "launch", 1.0, 0.0, cycles=0)
