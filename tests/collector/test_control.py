"""Duty-cycle controller and buffer budget arithmetic."""

from __future__ import annotations

import pytest

from collector.budget import BufferBudget, trim_heap
from collector.control import DutyController, Estimate


def _run(ctl, kernels_per_s, callback_us=2.0, periods=8, cycle_s=0.015):
    for _ in range(periods):
        on = ctl.duty * ctl.period_s()
        k = int(kernels_per_s * on)
        est = ctl.estimate(on, k, 0, k * callback_us * 1e-6, 0.0)
        if ctl.duty < 1:
            ctl.note_cycle(cycle_s)
        ctl.update(est)
    return ctl


def test_launch_bound_load_is_cut_to_the_budget():
    # ~65k launches/s while traced: the H200 launch-bound loop under full tracing
    ctl = _run(DutyController(2.0, kernel_cost_s=5.5e-6), kernels_per_s=65_000)
    assert ctl.f_on > 0.8  # tracing every kernel would nearly double the run time
    spent = ctl.duty * ctl.f_on + ctl.cycle_s / ctl.period_s()
    assert spent <= 0.02
    assert ctl.duty < 0.05


def test_min_duty_is_a_floor_even_over_budget():
    ctl = _run(DutyController(2.0, kernel_cost_s=20e-6), kernels_per_s=100_000)
    assert ctl.duty == pytest.approx(ctl.min_duty)


def test_light_load_is_traced_all_the_time():
    ctl = _run(DutyController(2.0, kernel_cost_s=5.5e-6), kernels_per_s=600)
    assert ctl.duty == 1.0


def test_duty_widens_at_most_4x_per_period_when_load_drops():
    ctl = _run(DutyController(2.0, kernel_cost_s=5.5e-6), kernels_per_s=100_000)
    low = ctl.duty
    seen = [low]
    for _ in range(10):
        _run(ctl, kernels_per_s=300, periods=1)
        seen.append(ctl.duty)
    assert seen[-1] == 1.0
    assert all(b <= 4 * a + 1e-12 for a, b in zip(seen, seen[1:]))


def test_first_period_is_inside_the_budget_even_for_the_worst_load():
    """No warm-up overshoot: before anything is measured the duty assumes full tracing doubles the
    run (the launch-bound loop measured on the H200), plus the prior detach/attach cost."""
    for budget in (1.0, 2.0, 5.0):  # below 1 % the 150 ms cycle floor alone uses half the budget at a 30 s period
        ctl = DutyController(budget)
        worst_f_on = 1.0
        spent = ctl.duty * worst_f_on + ctl.cycle_s / ctl.period_s()
        assert spent <= budget / 100 + 1e-12, (budget, ctl.duty, ctl.period_s())


def test_worst_load_stays_inside_the_budget_in_every_period():
    """Launch-bound load (f_on = 1.0 measured) from the first period on: never above budget."""
    ctl = DutyController(2.0, kernel_cost_s=5e-6)
    for _ in range(20):
        period, duty = ctl.period_s(), ctl.duty
        on = duty * period
        k = int(on / 2 / 5e-6)  # half the traced time is tracing cost: f_on = 1
        est = ctl.estimate(on, k, 0, 0.0, 0.0)
        assert est.fraction_on == pytest.approx(1.0, rel=0.01)
        cycle = 0.03
        assert duty * est.fraction_on + cycle / period <= 0.02 + 1e-9
        ctl.note_cycle(cycle)
        ctl.update(est)


def test_over_budget_shrinks_at_once():
    ctl = DutyController(2.0, kernel_cost_s=5e-6, initial_duty=1.0)
    ctl.update(Estimate(on_s=1.0, cost_s=0.5))
    assert ctl.duty < 0.05


def test_period_stretches_to_amortize_attach_cost():
    ctl = DutyController(2.0, cycle_floor_s=0.0)
    assert ctl.period_s() == pytest.approx(30.0)  # the 150 ms prior before a cycle is measured
    ctl.note_cycle(0.025)
    assert ctl.period_s() == pytest.approx(5.0)  # 25 ms per cycle <= 1/4 of a 2 % budget
    for _ in range(12):
        ctl.note_cycle(0.001)
    assert ctl.period_s() == ctl.min_period_s
    ctl.note_cycle(1.0)
    assert ctl.period_s() == ctl.max_period_s


def test_the_steady_period_is_the_period_once_an_on_phase_has_traced():
    """``steady_period_s`` (cudawatch doctor reads it) is what ``period_s`` returns after a traced
    on-phase; before one, a period above 30 s waits (the start-up cap)."""
    ctl = DutyController(2.0, min_period_s=300.0, max_period_s=300.0)
    assert ctl.steady_period_s() == 300.0 and ctl.period_s() == 30.0 == ctl.start_period_s()
    ctl.update(ctl.estimate(on_s=6.0, kernels=1000, copies=0, callback_s=0.001, overhead_s=0.0))
    assert ctl.period_s() == ctl.steady_period_s() == 300.0
    low = DutyController(0.5)  # cycling needs 120 s at 0.5 %; the default longest period caps it at 30
    assert low.steady_period_s() == low.period_s() == 30.0
    long_low = DutyController(0.5, min_period_s=300.0, max_period_s=300.0)  # the start-up cap yields to cycling's 120 s
    assert long_low.period_s() == long_low.start_period_s() == 120.0 and long_low.steady_period_s() == 300.0


def test_windows_follow_a_long_period_and_the_period_never_outgrows_the_window():
    """Every window must see tracing (its launches are scaled by 1/sampling_duty; a window without an
    on-phase would read as no kernels): the longest period is at most the window."""
    from cudawatch.config import CollectorTiming, ConfigError

    def timing(**env):
        return CollectorTiming.from_env(environ={k: str(v) for k, v in env.items()})

    assert timing() == CollectorTiming(60, 1.0, 30.0)  # the defaults: two on-phases a window at the longest period
    assert timing(CUDAWATCH_PERIOD_S=120) == CollectorTiming(120, 120.0, 120.0)  # the window follows the period
    assert timing(CUDAWATCH_PERIOD_S=110) == CollectorTiming(120, 110.0, 110.0)  # to the next divisor of the hour
    assert timing(CUDAWATCH_PERIOD_S=300, CUDAWATCH_WINDOW_S=600) == CollectorTiming(600, 300.0, 300.0)
    assert timing(CUDAWATCH_WINDOW_S=10) == CollectorTiming(10, 1.0, 10.0)  # a short window caps the stretch
    assert CollectorTiming.from_env(1, 0.5, environ={}) == CollectorTiming(1, 0.5, 1.0)
    with pytest.raises(ConfigError, match=r"the window \(window_s=60\)"):  # the argument, named as such
        CollectorTiming.from_env(60, 120.0, environ={})
    assert CollectorTiming.from_env(None, 2.0, environ={"CUDAWATCH_PERIOD_S": "0.5"}).min_period_s == 0.5  # the env wins
    for env, words in (({"CUDAWATCH_PERIOD_S": 120, "CUDAWATCH_WINDOW_S": 60}, "CUDAWATCH_PERIOD_S=120 is longer than the window"),
                       ({"CUDAWATCH_WINDOW_S": 7}, "CUDAWATCH_WINDOW_S=7 must divide 3600"),
                       ({"CUDAWATCH_WINDOW_S": "1m"}, "CUDAWATCH_WINDOW_S='1m' is not a whole number"),
                       ({"CUDAWATCH_PERIOD_S": 0}, "CUDAWATCH_PERIOD_S=0 must be in"),
                       ({"CUDAWATCH_PERIOD_S": "soon"}, "CUDAWATCH_PERIOD_S='soon' is not a number")):
        with pytest.raises(ConfigError, match=words):
            timing(**env)
    t = timing(CUDAWATCH_WINDOW_S=10)
    ctl = DutyController(2.0, min_period_s=t.min_period_s, max_period_s=t.max_period_s)
    ctl.note_cycle(1.0)  # a cycle cost that would stretch the period to its default 30 s
    assert ctl.period_s() == 10.0


def test_cycle_cost_never_counts_below_the_floor():
    """The collector thread measured 16 ms for a cycle that cost the program ~160 ms (H200, mixed)."""
    ctl = DutyController(2.0)
    ctl.note_cycle(0.016)
    assert ctl.cycle_s == pytest.approx(0.15)
    assert ctl.period_s() == pytest.approx(30.0)


def test_callback_time_counts_with_its_gil_factor():
    ctl = DutyController(2.0, kernel_cost_s=5e-6)
    est = ctl.estimate(1.0, 1000, 0, 0.01, 0.0)
    assert est.cost_s == pytest.approx(1000 * 5e-6 + 1.6 * 0.01)


def test_idle_on_phase_does_not_widen():
    """A program still loading data traces nothing: that must not open the duty before its GPU work starts."""
    ctl = DutyController(2.0)
    d = ctl.duty
    for _ in range(5):
        assert ctl.update(ctl.estimate(0.05, 0, 0, 0.0, 0.0)) == d


def test_too_short_on_phase_changes_nothing():
    ctl = DutyController(2.0)
    d = ctl.duty
    assert ctl.update(Estimate(on_s=0.001, cost_s=0.001)) == d


def test_bad_budget_is_rejected():
    with pytest.raises(ValueError):
        DutyController(0)


def test_budget_split_is_bounded_by_the_total():
    b = BufferBudget()
    assert b.total == 32 << 20 and b.bound() == 24 << 20 <= b.total  # 8 x 1 MiB host + 4 x 4 MiB device
    assert (b.host_buffer, b.device_buffer, b.device_pool_limit, b.host_buffers_max) == (1 << 20, 4 << 20, 4, 8)
    assert BufferBudget(1 << 20).host_buffer == 64 << 10  # a sixteenth of a small budget
    assert BufferBudget(host_buffer_bytes=2 << 20).bound() == b.total  # the largest host buffer fills the budget
    with pytest.raises(ValueError):
        BufferBudget(1000)
    with pytest.raises(ValueError, match="1/16 of the budget"):  # 8 MiB, allowed until CUPTI was seen holding 7 of them
        BufferBudget(host_buffer_bytes=8 << 20)


def test_the_budget_counts_the_host_buffers_cupti_was_seen_holding_at_once():
    """§23 (docs/benchmarks.md): four fully traced loops on an H100 recorded the most host buffers
    CUPTI held at once; the budget must assume at least that many, at every buffer size."""
    import json
    from pathlib import Path

    runs = Path(__file__).resolve().parents[1] / "data" / "cupti" / "bench" / "session_20261207h_h100"
    held = {f.stem: json.loads(f.read_text())["buffers_outstanding_max"] for f in runs.glob("hb_*.json")}
    assert held == {"hb_cnn_1024": 7, "hb_cnn_8192": 7, "hb_launch_1024": 4, "hb_launch_8192": 4}
    assert BufferBudget().host_buffers_max >= max(held.values())  # the old budget assumed 2


def test_the_host_buffer_size_can_be_set_and_a_bad_size_is_an_error(monkeypatch):
    """``CUDAWATCH_HOST_BUFFER_KIB`` as the session reads it (``collector_host_buffer``) sizes the budget."""
    from cudawatch.config import collector_host_buffer

    monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", "2048")
    b = BufferBudget(host_buffer_bytes=collector_host_buffer())
    assert BufferBudget.from_env().host_buffer == 2 << 20  # what the session and doctor build
    assert b.host_buffer == 2 << 20 and b.device_buffer == 4 << 20 and b.bound() == b.total
    assert BufferBudget(host_buffer_bytes=256 << 10).host_buffer == 256 << 10  # the argument wins
    assert BufferBudget().host_buffer == 1 << 20  # the budget alone reads no environment
    for bad in ("lots", "1.5", "16", "2049", "8192"):  # not a number, below 64 KiB, above a sixteenth of 32 MiB
        monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", bad)
        with pytest.raises(ValueError, match="CUDAWATCH_HOST_BUFFER_KIB|host buffer"):
            BufferBudget(host_buffer_bytes=collector_host_buffer())
    for bad in (16 << 10, 16 << 20):  # the budget checks its own argument too
        with pytest.raises(ValueError, match="host buffer"):
            BufferBudget(host_buffer_bytes=bad)
    monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", "")
    assert BufferBudget(host_buffer_bytes=collector_host_buffer()).host_buffer == 1 << 20


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_buffer_memory_goes_back_to_the_os():
    """What the tracer does after each detach: host buffers of CUPTI's size, malloc'd, written and
    freed as the binding does, are released by trim_heap (glibc reports 1 when it returned memory)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    size = BufferBudget().host_buffer
    first = libc.malloc(size)
    ctypes.memset(first, 1, size)
    libc.free(first)  # glibc raises its mmap threshold: the next buffers come from the heap
    bufs = [libc.malloc(size) for _ in range(4)]
    for b in bufs:
        ctypes.memset(b, 1, size)
    for b in bufs:
        libc.free(b)
    assert trim_heap() == 1


def test_a_long_period_waits_for_the_first_traced_on_phase():
    """The first on-phase comes as the collector starts, before most programs launch anything; at a
    120-s period the next came two minutes later and the window with the first 6,050 training steps
    read no kernels (§23). Until an on-phase traces something the period is the default's at most."""
    from cudawatch.config import DEFAULT_MAX_PERIOD_S

    ctl = DutyController(2.0, min_period_s=120.0, max_period_s=120.0)  # CUDAWATCH_PERIOD_S=120
    assert ctl.period_s() == DEFAULT_MAX_PERIOD_S == 30.0
    ctl.update(Estimate(on_s=0.4, cost_s=0.0, records=0))  # an idle on-phase: still waiting
    assert ctl.period_s() == 30.0
    ctl.update(Estimate(on_s=0.4, cost_s=0.01, records=2000))  # the program's first kernels
    assert ctl.period_s() == 120.0
    ctl.update(Estimate(on_s=0.4, cost_s=0.0, records=0))  # later idle on-phases keep the period
    assert ctl.period_s() == 120.0
    assert DutyController(2.0, min_period_s=1.0, max_period_s=10.0).period_s() == 10.0  # a shorter window's cap stays


def test_the_start_up_cap_never_undercuts_what_cycling_needs_at_a_low_budget():
    """At a 0.5 % budget cycling needs 120-s periods (150 ms a cycle at most a quarter of the budget):
    capping those at 30 s before the first traced on-phase would spend the whole budget on cycles."""
    ctl = DutyController(0.5, min_period_s=120.0, max_period_s=120.0)
    assert ctl.period_s() == 120.0 and ctl.duty > ctl.min_duty
