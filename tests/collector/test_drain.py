"""The wait before a detach's forced flush: adaptation rule, configuration, and its place in the detach.

The detach order itself is checked with a stand-in for the ``cupti`` module (CI has no GPU and no
cupti-python): its forced flush returns the kernels that have not finished by then without
timestamps, as CUPTI does; the real effect is measured on the H200 (docs/benchmarks.md).
"""

from __future__ import annotations

import pytest

from collector.drain import DEFAULT_MAX_S, DEFAULT_START_S, FENCE_TIMEOUTS_TO_DROP, FINAL_MAX_S, LIMIT_MS, SHRINK, DetachDrain

from .stand_in_cupti import _run_stand_in


def queue_loss(wait_s: float, queue_s: float, in_flight: int = 430) -> int:
    """Records returned without timestamps when ``in_flight`` kernels finish evenly over ``queue_s``."""
    return int(in_flight * max(0.0, 1.0 - wait_s / queue_s))


def test_a_lossy_detach_doubles_the_wait_up_to_the_maximum():
    d = DetachDrain(0.1, start_s=0.01)
    waits = []
    for _ in range(6):
        waits.append(d.wait_s())
        d.note(lost=queue_loss(d.wait_s(), queue_s=0.5), waited_s=d.wait_s())
    assert waits == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1, 0.1])
    assert d.lossy == 6 and d.lost == sum(queue_loss(w, 0.5) for w in waits)
    assert d.waited_s == pytest.approx(sum(waits))
    assert d.summary()["lost_per_detach"] == pytest.approx(d.lost / 6)


def test_clean_detaches_shrink_the_wait_to_the_minimum():
    d = DetachDrain(0.1, start_s=0.08, min_s=0.002)
    for _ in range(200):
        d.note(lost=0, waited_s=d.wait_s())
    assert d.wait_s() == pytest.approx(0.002)
    assert d.lossy == 0
    d.note(lost=1, waited_s=d.wait_s())  # a loss after shrinking: grows again from the minimum
    assert d.wait_s() == pytest.approx(0.004)


def test_the_wait_settles_just_above_a_steady_queue():
    """A program whose GPU queue always takes 30 ms to drain: after a few lossy detaches the wait
    covers the queue; from then on one detach in ~14 probes lower and loses a few records."""
    queue_s = 0.03
    d = DetachDrain(0.1)
    lossy_late = lost_late = 0
    for i in range(200):
        w = d.wait_s()
        lost = queue_loss(w, queue_s)
        if i >= 20:
            lossy_late += lost > 0
            lost_late += lost
        d.note(lost, w)
    assert 0 < lossy_late <= 180 // 10  # shrinks 5 % per clean detach, doubles after a loss
    assert lost_late < 0.1 * 430 * lossy_late  # a probe below the queue loses only its last few kernels
    assert queue_s * 0.75 <= d.wait_s() <= 2 * queue_s


@pytest.mark.parametrize("lost", [1, 3, 400])
def test_a_loss_that_waiting_does_not_reduce_keeps_the_wait_short(lost):
    """A kernel that never ends (persistent, NCCL) or an exhausted device-buffer pool loses the same
    records however long the detach waits: the wait must not sit at the maximum on every detach."""
    d = DetachDrain(0.1)
    waits = []
    for _ in range(50):
        waits.append(d.wait_s())
        d.note(lost, d.wait_s())
    assert max(waits[2:]) <= 0.02 and sum(waits) < 50 * 0.01


def test_env_sets_the_maximum_and_zero_turns_it_off(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_DETACH_DRAIN_MS", raising=False)
    assert DetachDrain().max_s == DEFAULT_MAX_S
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "40")
    assert DetachDrain().max_s == pytest.approx(0.04)
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "0")
    off = DetachDrain()
    for _ in range(5):
        off.note(lost=100, waited_s=off.wait_s())
    assert off.wait_s() == 0.0 and off.lost == 500


@pytest.mark.parametrize("raw", ["fast", "nan", "inf", "-5", "1e6"])
def test_a_malformed_env_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", raw)
    with pytest.raises(ValueError, match="CUDAWATCH_DETACH_DRAIN_MS"):
        DetachDrain()


def test_a_bad_setting_turns_the_collector_off_not_the_program(tmp_path, monkeypatch):
    from collector.session import Session

    from .conftest import RECORDS

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setattr("collector.replay.DetachDrain", lambda *a: DetachDrain())  # the env read a CuptiTracer does
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "nan")
    s = Session(job="bad-drain", out=tmp_path).start()
    assert not s.active and "CUDAWATCH_DETACH_DRAIN_MS" in s.reason
    s.stop()


@pytest.mark.parametrize("drain_ms, want_lost", [("0", 50), ("200", 0)])
def test_detach_waits_for_queued_kernels_before_the_forced_flush(tmp_path, drain_ms, want_lost):
    """50 kernels queued to finish 5-50 ms (virtual clock) after the detach starts: without a wait
    all 50 come back without timestamps; with the wait (10, 20, 40, then 80 ms: three lossy detaches
    to grow past 50 ms) the fourth detach loses none, and the order is disable, unforced flush, wait,
    forced flush, finalize."""
    lost, calls, taken = _run_stand_in(tmp_path, """
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        lost, taken = [], []
        for _ in range(4):
            lost.append(queued_detach(t, agg))
            taken.append(t.drain.take_last())
        print(json.dumps([lost, cupti.calls, taken + [t.drain.take_last()]]))
    """, CUDAWATCH_DETACH_DRAIN_MS=drain_ms)
    assert lost[-1] == want_lost
    # what the duty log gets per detach: (wait, records without timestamps), once
    assert [n for _, n in taken[:4]] == lost and taken[4] == [0.0, 0]
    if drain_ms == "0":
        assert lost == [50] * 4 and calls == ["disable"] * 4 + ["flush", "flush_forced", "finalize"]
    else:
        assert lost[0] > lost[1] > lost[2] > 0  # each doubling catches more of the queue
        assert calls == ["disable"] * 4 + ["flush", "wait 0.08", "flush_forced", "finalize"]


def test_the_latest_detach_is_taken_once():
    d = DetachDrain(0.1)
    assert d.take_last() == (0.0, 0)  # no detach yet
    d.note(0, 0.01)
    d.note(37, 0.02)
    assert d.take_last() == (0.02, 37) and d.take_last() == (0.0, 0)


@pytest.mark.parametrize("bound_ms, want_lost", [("200", [0, 0, 0]), ("20", [33, 33, 33])])
def test_with_a_fence_each_detach_waits_as_long_as_its_queue_up_to_the_bound(tmp_path, bound_ms, want_lost):
    """CUDAWATCH_DETACH_DRAIN=fence: the detach waits on the fence (here a stand-in that returns when
    the stand-in CUPTI's last queued kernel finishes on the virtual clock, or at the bound) instead of
    guessing: nothing lost from the first detach when the queue fits the bound; past the bound the
    same loss every detach (the adaptive floor grows, but never past the bound), and the order stays disable, unforced flush, fence,
    forced flush, finalize."""
    lost, waits, calls, total = _run_stand_in(tmp_path, """
        class VirtualFence:
            def wait(self, bound_s):
                cupti.calls.append("fence")
                now = cupti.state["now"]
                waited = min(bound_s, max(cupti.state["queue"], default=now) - now)
                cupti.state["now"] += waited
                self.timed_out = waited >= bound_s
                return waited
        collector.drain.StreamFence = VirtualFence
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        lost, waits = [], []
        for _ in range(3):
            lost.append(queued_detach(t, agg))
            waits.append(t.drain.take_last()[0])
        print(json.dumps([lost, waits, cupti.calls, t.drain.summary()["lost"]]))
    """, CUDAWATCH_DETACH_DRAIN="fence", CUDAWATCH_DETACH_DRAIN_MS=bound_ms)
    assert lost == want_lost and total == sum(want_lost)
    assert waits == pytest.approx([min(0.05, int(bound_ms) / 1e3)] * 3)  # the queue's length, or the bound
    assert calls == ["disable"] * 4 + ["flush", "fence", "flush_forced", "finalize"]


def test_the_fence_is_on_by_default_and_adaptive_turns_it_off(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_DETACH_DRAIN", raising=False)
    d = DetachDrain()
    assert d.fence is not None and d.wait_s() == 0.01  # the adaptive wait's start: the floor under the fence
    assert DetachDrain(0.0).fence is None  # a drain turned off has no fence either
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN", "adaptive")
    assert DetachDrain().fence is None
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN", "sometimes")
    with pytest.raises(ValueError, match="'adaptive' or 'fence'"):
        DetachDrain()


class Fence:
    """A fence that returns after ``takes_s`` seconds (default half the bound), or is skipped (a graph
    capture); counts its calls and the bounds it was given."""

    def __init__(self, takes_s=None, skip=False):
        self.takes_s, self.skip, self.bounds = takes_s, skip, []

    def wait(self, bound_s):
        self.bounds.append(bound_s)
        if self.skip:
            return None
        took = bound_s / 2 if self.takes_s is None else self.takes_s
        self.timed_out = took >= bound_s
        return took


def test_a_failed_fence_is_dropped_once_and_the_adaptive_wait_goes_on():
    from collector.cuda_fence import FenceError

    class Broken:
        def wait(self, bound_s):
            raise FenceError("cuEventRecord returned CUDA error 700")

    d = DetachDrain(0.1, fence=Broken())
    assert d.wait() == 0.01  # slept the adaptive wait instead
    assert d.fence is None and "CUDA error 700" in d.fence_error and d.wait_s() == 0.01
    assert d.take_errors() == ["detach fence: cuEventRecord returned CUDA error 700"] and d.take_errors() == []
    assert d.wait() == 0.01 and d.take_errors() == []  # counted once


def test_the_fence_waits_up_to_the_longest_wait_and_the_adaptive_wait_is_its_floor():
    fence = Fence(takes_s=0.05)  # a shared GPU: the queue takes 50 ms
    d = DetachDrain(0.1, fence=fence)
    assert d.wait() == 0.05 and fence.bounds == [0.1]  # longer than the floor: nothing added
    fence.takes_s = 0.0  # alone on the GPU: the fence returns at once
    assert d.wait() == 0.01  # the adaptive floor is the whole wait
    fence.takes_s = 0.004
    assert d.wait() == pytest.approx(0.01)  # 4 ms on the fence, the other 6 ms slept
    assert d.summary()["fence"]["set_wait"] == 1  # only the 50-ms fence outlasted the floor


def test_losses_the_fence_cannot_see_still_grow_the_adaptive_floor():
    """Records lost although the fence returned (work on a non-blocking stream): the floor doubles as
    in adaptive mode, and shrinks again after clean detaches."""
    d = DetachDrain(0.1, fence=Fence(takes_s=0.0))
    for lost, want in ((50, 0.02), (30, 0.04), (0, 0.038)):
        d.note(lost, d.wait())
        assert d.wait_s() == pytest.approx(want)
    assert d.summary()["lost"] == 80 and d.summary()["lossy"] == 2


def test_a_fence_skipped_for_a_graph_capture_sleeps_the_adaptive_wait_and_stays():
    fence = Fence(skip=True)
    d = DetachDrain(0.1, fence=fence)
    assert d.wait() == 0.01 and len(fence.bounds) == 1  # not no wait at all
    assert d.fence is fence and d.take_errors() == []
    fence.skip = False
    assert d.wait() == 0.05 and len(fence.bounds) == 2


def test_the_programs_last_detach_fences_with_the_longer_bound():
    fence = Fence(takes_s=0.05)
    d = DetachDrain(0.1, fence=fence)
    assert d.wait(final=True) == 0.05 and fence.bounds == [FINAL_MAX_S]  # the records of its queue are lost for good
    assert d.summary()["fence"]["final_fenced"] == 1
    assert d.wait() == 0.05 and fence.bounds == [FINAL_MAX_S, 0.1]
    d.note(0, 0.05)
    assert d.summary()["next_wait_s"] == pytest.approx(0.0095) and d.summary()["last_waited_s"] == 0.05
    assert DetachDrain(0.0, fence=fence).wait(final=True) == 0.0 and len(fence.bounds) == 2  # drain off: no final fence either
    assert FINAL_MAX_S > LIMIT_MS / 1e3  # never shorter than any detach's own bound


def test_the_last_fence_running_to_its_bound_neither_drops_the_fence_nor_joins_the_streak():
    """Four fences in a row at the 100-ms bound, then the last detach's at 2 s: no "5 in a row" error
    (with the wrong bound in it) in the last window; the streak is the normal detaches' alone."""
    fence = Fence(takes_s=5.0)  # every fence runs to its bound
    d = DetachDrain(0.1, fence=fence)
    for _ in range(FENCE_TIMEOUTS_TO_DROP - 1):
        d.note(0, d.wait())
    d.note(0, d.wait(final=True))
    assert d.fence is fence and d.take_errors() == [] and fence.bounds[-1] == FINAL_MAX_S
    d.wait()  # the fifth normal one drops it, naming the normal bound
    assert d.fence is None and d.take_errors() == ["detach fence: 5 fences in a row ran to the 100-ms bound (a kernel that never ends?)"]


def test_a_last_detach_asked_not_to_fence_sleeps_the_adaptive_floor_only():
    """The session's late detach (its thread, after stop() gave up on it) passes fence=False."""
    fence = Fence(takes_s=0.001)
    d = DetachDrain(0.1, fence=fence)
    assert d.wait(final=True, fence=False) == 0.01 and fence.bounds == []  # the adaptive floor only
    assert d.wait() == pytest.approx(0.01) and fence.bounds == [0.1]  # 1 ms fenced, 9 ms slept
    assert d.summary()["fence"]["unfenced"] == 1 and d.summary()["fence"]["final_fenced"] == 0


def test_a_fence_that_fails_in_a_detach_is_counted_in_health_and_the_adaptive_wait_runs(tmp_path):
    """The stand-in CUPTI's detach with a fence that raises: the window gets the error, the tracer
    counts it once, and this detach sleeps the adaptive wait's start (10 ms), not the fence's bound."""
    calls, detach_errors, errors, fence_error = _run_stand_in(tmp_path, """
        class Broken:
            def wait(self, bound_s):
                cupti.calls.append("fence")
                raise FenceError("cuEventRecord returned CUDA error 700", 700)
        collector.drain.StreamFence = Broken
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        calls = []
        for _ in range(2):
            queued_detach(t, agg)
            calls += cupti.calls
        errors = [(w.errors, w.last_error) for w in agg._windows.values() if w.errors]
        print(json.dumps([calls, t.detach_errors, errors, t.drain.summary()["fence_error"]]))
    """, CUDAWATCH_DETACH_DRAIN="fence")
    fence_and_waits = [c for c in calls if c == "fence" or c.startswith("wait")]
    assert fence_and_waits[0] == "fence" and len(fence_and_waits) == 3  # the failed fence's own time counts as waited:
    assert [float(c.split()[1]) for c in fence_and_waits[1:]] == pytest.approx([0.01, 0.02], abs=1e-3)  # the rest slept
    assert detach_errors == 1 and errors == [[1, "detach fence: cuEventRecord returned CUDA error 700"]]
    assert fence_error == "cuEventRecord returned CUDA error 700"


def test_the_tracers_last_detach_fences_with_the_longer_bound(tmp_path):
    """``detach(final=True)`` (the session's stop, at the program's exit) passes ``final`` to the drain:
    the fence with ``FINAL_MAX_S`` as its bound, then the rest of the adaptive floor, as any detach."""
    calls = _run_stand_in(tmp_path, """
        class Counting:
            timed_out = False

            def wait(self, bound_s):
                cupti.calls.append(f"fence {bound_s}")
                return 0.001
        collector.drain.StreamFence = Counting
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        t.attach()
        t.detach()
        t.attach()
        t.detach(final=True)
        print(json.dumps(cupti.calls))
    """, CUDAWATCH_DETACH_DRAIN="fence")
    waits = [c for c in calls if c.startswith("fence") or c.startswith("wait")]
    # 1 ms on the fence and the other 9 ms of the adaptive floor; at the end the same with the floor shrunk 5 %
    assert waits == [f"fence {DEFAULT_MAX_S}", "wait 0.009", f"fence {FINAL_MAX_S}", "wait 0.0085"]


def test_the_fences_own_time_never_decides_whether_waiting_longer_helped():
    """Fence waits of 30 then 31 ms with 50 then 60 records lost (work the fence cannot see): the fence,
    not the rules, set those waits, so the adaptive wait doubles (10 -> 20 -> 40 ms) until it outlasts
    the fence, instead of falling to 2 ms because the fence happened to wait 1 ms longer. Once the
    adaptive wait sets the wait again, the "waited longer, lost as many" rule applies as before."""
    fence = Fence(takes_s=0.03)
    d = DetachDrain(0.1, fence=fence)
    d.note(50, d.wait())
    assert d.wait_s() == pytest.approx(0.02)
    fence.takes_s = 0.031
    d.note(60, d.wait())
    assert d.wait_s() == pytest.approx(0.04)  # the old rule on total waits (31 > 30 ms, 60 >= 50) reset it to 2 ms
    assert d.wait() == pytest.approx(0.04)  # now the adaptive wait outlasts the fence: 31 ms fenced, 9 ms slept
    d.note(50, 0.04)
    assert d.wait_s() == pytest.approx(0.08)
    d.note(50, d.wait())  # waited 80 > 40 ms and lost as many: not a queue, as in adaptive mode
    assert d.wait_s() == pytest.approx(0.002)


def test_five_fences_in_a_row_at_the_bound_drop_the_fence_once():
    """A kernel that never ends on the legacy stream: every fence runs to the bound. Four in a row, then
    one that finished, restart the count; five in a row drop the fence, counted once in health."""
    from collector.cuda_fence import StreamFence

    class Endless(StreamFence):  # the real bookkeeping of timeouts, without a driver
        def __init__(self):
            super().__init__(lib=object())
            self.finish = False

        def wait(self, bound_s):
            self.waits += 1
            self.timeouts += not self.finish
            self.timed_out = not self.finish
            return 0.001 if self.finish else bound_s

    fence = Endless()
    d = DetachDrain(0.02, fence=fence)
    for _ in range(4):
        assert d.wait() == 0.02
    fence.finish = True
    d.wait()
    fence.finish = False
    for _ in range(4):
        d.wait()
    assert d.fence is fence and d.take_errors() == []
    d.wait()
    assert d.fence is None and fence.timeouts == 9
    assert d.take_errors() == ["detach fence: 5 fences in a row ran to the 20-ms bound (a kernel that never ends?)"]
    assert d.wait() == 0.01 and d.take_errors() == []  # the adaptive wait alone from now on


def test_the_summary_accounts_for_every_detach():
    """With the real fence on a stand-in driver: a detach before CUDA is initialized (idle), a wait, a
    skip for a graph capture, the last detach (a wait) and those after the fence failed each land in
    one count, so none is unexplained."""
    from collector.cuda_fence import StreamFence
    from tests.collector.test_cuda_fence import StandInDriver

    drv = StandInDriver(initialized=False, polls=2)
    d = DetachDrain(0.1, fence=StreamFence(lib=drv))
    d.note(0, d.wait())
    drv.initialized = True
    d.note(0, d.wait())
    drv.capture = "blocking"
    d.note(0, d.wait())
    drv.capture = None
    d.note(0, d.wait(final=True))
    drv.fail = "cuEventRecord"  # the fence fails: dropped, this detach and the rest unfenced
    d.note(0, d.wait())
    d.note(0, d.wait(final=True))
    try:  # an interrupt in a wait: no wait completed
        d.fence = Interrupting()
        d.note(0, d.wait())
    except KeyboardInterrupt:
        d.note(0, 0.0)
    f, summary = d.summary()["fence"], d.summary()
    assert (f["idle"], f["waits"], f["skipped"], f["unfenced"], summary["unwaited"]) == (1, 2, 1, 2, 1)
    assert summary["detaches"] == sum(f[k] for k in ("idle", "waits", "skipped", "unfenced")) + summary["unwaited"] == 7
    assert f["final_fenced"] == 1  # of the two last detaches, the one after the fence was dropped had none


class Interrupting:
    def wait(self, bound_s):
        raise KeyboardInterrupt


def test_a_detach_that_fails_is_still_noted_once_and_accounted_for(tmp_path):
    """An unforced flush that raises (before the wait) lands in ``unwaited``; a finalize that raises
    (after a fence wait) is still noted. Either way the error reaches the caller, and the detaches
    equal the fence's waits plus the unwaited ones."""
    outcomes, summary = _run_stand_in(tmp_path, """
        class Quick:
            timed_out, waits = False, 0

            def wait(self, bound_s):
                self.waits += 1
                return 0.001
        collector.drain.StreamFence = Quick
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)
        flush, fin = cupti.activity_flush_all, cupti.finalize

        def bad_flush(flag):
            if not flag:
                raise cupti.cuptiError(99)
            flush(flag)

        def bad_finalize():
            fin()
            raise cupti.cuptiError(98)
        outcomes = []
        for broken in ("flush", None, "finalize"):
            cupti.activity_flush_all = bad_flush if broken == "flush" else flush
            cupti.finalize = bad_finalize if broken == "finalize" else fin
            t.attach()
            try:
                t.detach()
                outcomes.append("ok")
            except cupti.cuptiError as exc:
                outcomes.append(str(exc))
        print(json.dumps([outcomes, t.drain.summary()]))
    """, CUDAWATCH_DETACH_DRAIN="fence")
    assert outcomes == ["CUPTI status 99", "ok", "CUPTI status 98"]
    assert (summary["detaches"], summary["unwaited"], summary["fence"]["waits"]) == (3, 1, 2)
    # the two failed detaches taught the rules nothing: only the clean one shrank the floor
    assert summary["failed"] == 2 and summary["next_wait_s"] == pytest.approx(DEFAULT_START_S * SHRINK)


def test_a_failed_detach_is_counted_but_never_steers_the_wait(monkeypatch):
    """A detach that failed before its forced flush or in its finalize may not have delivered its
    records: no loss there would read as a clean detach and shrink the wait. Its losses count; the
    wait stays."""
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN", "adaptive")
    d = DetachDrain(0.1)
    d.note(0, 0.01, failed=True)
    d.note(7, 0.01, failed=True)
    assert d.current_s == DEFAULT_START_S and (d.failed, d.detaches, d.lost, d.lossy) == (2, 2, 7, 1)
    d.note(7, 0.01)  # a clean detach that lost: the wait doubles as before
    assert d.current_s == 2 * DEFAULT_START_S


def test_a_skip_between_fences_at_the_bound_does_not_restart_their_count():
    """A kernel that never ends while another stream captures graphs now and then: the skips say
    nothing about the queue, so four timeouts, a skip and one more timeout drop the fence."""
    fence = Fence(takes_s=0.02)
    d = DetachDrain(0.02, fence=fence)
    for _ in range(4):
        d.wait()
    fence.skip = True
    d.wait()
    fence.skip = False
    assert d.fence is fence
    d.wait()
    assert d.fence is None and "5 fences in a row" in d.fence_error


def test_only_the_fences_own_verdict_counts_as_running_to_the_bound():
    """Driver calls around the poll that are slow (a full launch queue under sharing) can make a fence
    take the bound although its events completed: that is a wait, not a kernel that never ends."""
    class Slow(Fence):
        def wait(self, bound_s):
            super().wait(bound_s)
            self.timed_out = False  # the events completed; the calls around them took the time
            return bound_s

    d = DetachDrain(0.02, fence=Slow())
    for _ in range(8):
        assert d.wait() == 0.02
    assert d.fence is not None and d.fence_error is None


def test_the_time_a_failing_fence_took_counts_as_waited(monkeypatch):
    import types

    import collector.drain
    from collector.cuda_fence import FenceError

    clock = [0.0]  # virtual: the drain's own clock and sleep, so no runner's load moves the figures
    monkeypatch.setattr(collector.drain, "time", types.SimpleNamespace(
        perf_counter=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)))

    class SlowBroken:
        def wait(self, bound_s):
            clock[0] += 0.03
            raise FenceError("cuEventQuery returned CUDA error 700", 700)

    d = DetachDrain(0.1, fence=SlowBroken())
    waited = d.wait()
    assert 0.03 <= waited < 0.09  # the 30 ms it took, not the 10-ms floor slept on top of nothing
    assert waited == pytest.approx(0.03) and clock[0] == pytest.approx(0.03)  # nothing slept after
    d.note(0, waited)
    assert d.summary()["fence"]["unfenced"] == 1 and d.summary()["waited_s"] == waited
    assert d.fence_error == "cuEventQuery returned CUDA error 700"


def test_the_tracer_holds_its_operation_lock_through_a_whole_detach(tmp_path):
    """``Session.stop`` takes ``op_lock`` to tell whether the collector's thread is inside CUPTI: the
    thread must hold it through the drain's wait, and let it go after a detach, also one that raised."""
    seen, after, after_error = _run_stand_in(tmp_path, """
        import threading
        agg = Aggregator(window_s=60)
        t = CuptiTracer(agg)

        def free():  # asked from another thread, as stop() does
            got = []

            def probe():
                got.append(t.op_lock.acquire(blocking=False))
                if got[0]:
                    t.op_lock.release()
            th = threading.Thread(target=probe)
            th.start()
            th.join()
            return got[0]
        seen, wait = [], t.drain.wait

        def watching(**kw):
            seen.append(free())
            return wait(**kw)
        t.drain.wait = watching
        t.attach()
        t.pause()
        after = free()

        def bad_flush(flag):
            raise cupti.cuptiError(99)
        cupti.activity_flush_all = bad_flush
        t.attach()
        try:
            t.detach()
        except cupti.cuptiError:
            pass
        print(json.dumps([seen, after, free()]))
    """)
    assert seen == [False] and after is True and after_error is True
