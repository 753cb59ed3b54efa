"""Where a detach's cuptiFinalize runs (collector.finalize): configuration, and with the stand-in
``cupti`` module of test_drain, the callback path (an application thread's API exit), the timeout
path (an idle application), the fallback when CUPTI refuses a subscriber, and exactly-once under a
race between the two. Whether it removes the H200 segfault is for the GPU to show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import signal
import textwrap
import threading
import time
import types

import pytest

from collector.finalize import DEFAULT_TIMEOUT_S, DetachFinalizer, finalize_mode

from .conftest import REPO
from .stand_in_cupti import FAKE_CUPTI


def test_thread_is_the_default_and_callback_is_opt_in(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_FINALIZE", raising=False)
    assert finalize_mode() == "thread" and DetachFinalizer().mode == "thread"
    monkeypatch.setenv("CUDAWATCH_FINALIZE", "")
    assert finalize_mode() == "thread"
    monkeypatch.setenv("CUDAWATCH_FINALIZE", "callback")
    f = DetachFinalizer()
    assert f.mode == "callback" and f.timeout_s == DEFAULT_TIMEOUT_S
    assert f.summary() == {"mode": "callback", "completed": 0, "in_thread": 0, "in_callback": 0, "by_timeout": 0, "fallback": 0,
                           "errors": 0, "last_fallback": None, "last_error": None}


@pytest.mark.parametrize("raw", ["callbacks", "Thread", "api-exit", " thread", "1"])
def test_a_bad_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("CUDAWATCH_FINALIZE", raw)
    with pytest.raises(ValueError, match="CUDAWATCH_FINALIZE"):
        DetachFinalizer()


SCRIPT = textwrap.dedent("""
    import json, random, sys, threading, time
    from cupti import cupti
    from collector.aggregate import Aggregator
    from collector.finalize import DetachFinalizer
    from collector.tracer import CuptiTracer

    scenario = sys.argv[1]
    if scenario == "bad_env":
        try:
            CuptiTracer(Aggregator(window_s=60))
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}))
        sys.exit(0)
    timeout_s = 0.003 if scenario == "race" else 0.2
    t = CuptiTracer(Aggregator(window_s=60), finalizer=DetachFinalizer(timeout_s=timeout_s))
    cupti.state["refuse_subscribe"] = scenario == "refused"
    if scenario == "unsubscribe_fails":
        def unsubscribe(h):
            raise cupti.cuptiError(42)
        cupti.unsubscribe = unsubscribe
    if scenario == "finalize_fails":  # the thread mode's cuptiFinalize fails: detach raises, the tracer is detached
        def finalize():
            raise cupti.cuptiError(7)
        cupti.finalize = finalize
        t.finalizer.mode = "thread"
    stop = threading.Event()

    def app():  # the application thread: CUDA calls every 0.5 ms (race: at random 0-6 ms gaps)
        while not stop.is_set():
            cupti.api_call()
            time.sleep(random.uniform(0, 0.006) if scenario == "race" else 0.0005)

    app_thread = threading.Thread(target=app, name="app")
    if scenario not in ("idle", "late"):
        app_thread.start()
    if scenario == "late":  # the only API exit comes right after the collector's wait timed out
        import types
        import collector.finalize as F

        class LateEvent(threading.Event):
            def wait(self, timeout=None):
                if timeout == timeout_s:
                    late = threading.Thread(target=cupti.api_call, name="app")
                    late.start()
                    late.join()
                    return False
                return super().wait(timeout)
        F.threading = types.SimpleNamespace(Event=LateEvent, Lock=threading.Lock)  # this module's Events only
    n = 200 if scenario == "race" else 3
    out = {"how": [], "detach_s": [], "calls": []}
    orig = t.finalizer.finalize

    def finalize():
        out["how"].append(orig())
    t.finalizer.finalize = finalize

    def collector():
        for _ in range(n):
            t.attach()
            cupti.calls.clear()
            t0 = time.perf_counter()
            try:
                t.detach()
            except cupti.cuptiError as exc:
                out.setdefault("raised", []).append([exc.status, t.attached, t.enabled])
            out["detach_s"].append(time.perf_counter() - t0)
            out["calls"].append(list(cupti.calls))
    c = threading.Thread(target=collector, name="collector")
    c.start()
    c.join(60)
    stop.set()
    if app_thread.ident is not None:
        app_thread.join(10)
    out.update(finalizes=t.finalizes, finalized_on=cupti.finalized_on, finalized_at=cupti.finalized_at, overlaps=cupti.state["overlaps"],
               summary=t.finalizer.summary(), attached=t.attached, subscriber_left=cupti.state["subscriber"] is not None,
               health_errors=[[w.errors, w.last_error] for w in t.agg.take_all() if w.errors])
    print(json.dumps(out))
""")


def run(tmp_path, scenario: str, **env_extra) -> dict:
    (tmp_path / "cupti").mkdir(exist_ok=True)
    (tmp_path / "cupti" / "__init__.py").write_text("")
    (tmp_path / "cupti" / "cupti.py").write_text(FAKE_CUPTI)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    env.update({"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "CUDAWATCH_DETACH_DRAIN_MS": "0",
                "CUDAWATCH_FINALIZE": "callback", **env_extra})
    p = subprocess.run([sys.executable, "-c", SCRIPT, scenario], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def assert_order(calls: list) -> None:
    """Forced flush, then subscribe, then enable the domain; unsubscribe before the one finalize, which is last."""
    assert calls.index("flush_forced") < calls.index("subscribe") < calls.index("enable_domain")
    assert calls.index("unsubscribe") < calls.index("finalize")
    assert calls.count("finalize") == 1 and calls[-1] == "finalize"


def test_the_first_api_exit_on_an_application_thread_finalizes_once(tmp_path):
    out = run(tmp_path, "callback")
    assert out["how"] == ["callback"] * 3
    assert out["finalized_on"] == ["app"] * 3  # exactly once per detach, never on the collector's thread
    assert out["finalizes"] == 3  # each counted (status file, cudawatch_collector_cupti_finalizes_total)
    assert out["finalized_at"] == [1] * 3  # inside the API_EXIT callback, never at API_ENTER
    assert out["summary"]["in_callback"] == 3 and out["summary"]["by_timeout"] == out["summary"]["fallback"] == 0
    assert out["summary"]["errors"] == 0 and out["overlaps"] == 0
    # the forced flush before the subscription: nothing for the buffer callback when finalize runs
    for calls in out["calls"]:
        assert_order(calls)
        assert calls.count("enable_domain") == 1  # DRIVER_API only
    assert max(out["detach_s"]) < DEFAULT_TIMEOUT_S
    assert not out["attached"] and not out["subscriber_left"]
    assert out["health_errors"] == []  # nothing failed: nothing in health


def test_a_failing_finalize_raises_and_leaves_the_tracer_detached(tmp_path):
    """A detach whose cuptiFinalize raises is reported by the raise (the session counts it), not
    handed on a second time, and the tracer is marked detached, so the next attach registers the
    buffer callbacks again instead of enabling kinds on a CUPTI that may be gone."""
    out = run(tmp_path, "finalize_fails")
    assert out["raised"] == [[7, False, False]] * 3
    assert out["finalizes"] == 0  # a finalize that raised is not counted as a cycle done
    assert out["health_errors"] == []


def test_an_idle_application_is_finalized_by_the_collector_after_the_timeout(tmp_path):
    out = run(tmp_path, "idle")
    assert out["how"] == ["timeout"] * 3
    assert out["finalized_on"] == ["collector"] * 3 and out["finalized_at"] == [None] * 3
    assert out["summary"]["by_timeout"] == 3 and out["summary"]["in_callback"] == 0
    assert min(out["detach_s"]) >= DEFAULT_TIMEOUT_S
    assert out["overlaps"] == 0 and out["finalizes"] == 3
    for calls in out["calls"]:
        assert_order(calls)
    assert not out["subscriber_left"]


def test_a_refused_subscriber_falls_back_to_the_thread_finalize_and_counts_it(tmp_path):
    out = run(tmp_path, "refused")
    assert out["how"] == ["fallback"] * 3
    assert out["finalized_on"] == ["collector"] * 3
    s = out["summary"]
    assert s["fallback"] == 3 and s["in_callback"] == s["by_timeout"] == 0
    assert "subscribe" in s["last_fallback"] and "status 1" in s["last_fallback"]  # ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert out["calls"][0] == ["disable"] * 4 + ["flush", "flush_forced", "finalize"]
    assert not out["attached"] and out["finalizes"] == 3


def test_callback_and_timeout_racing_still_finalize_exactly_once(tmp_path):
    """A 3 ms timeout against API calls 0-6 ms apart: both paths win some detaches; every detach
    finalizes once, and no CUPTI call overlaps a finalize."""
    out = run(tmp_path, "race")
    s = out["summary"]
    assert len(out["finalized_on"]) == 200 and s["in_callback"] + s["by_timeout"] == 200 == out["finalizes"]
    assert s["in_callback"] > 0 and s["by_timeout"] > 0
    assert out["overlaps"] == 0 and s["errors"] == 0
    assert all(calls.count("finalize") == 1 and calls[-1] == "finalize" for calls in out["calls"])


def test_an_exit_just_after_the_timeout_is_finalized_by_its_callback_alone(tmp_path):
    out = run(tmp_path, "late")
    assert out["how"] == ["callback"] * 3 and out["finalized_on"] == ["app"] * 3
    assert out["summary"]["in_callback"] == 3 and out["summary"]["by_timeout"] == 0 and out["overlaps"] == 0


def test_a_failed_unsubscribe_is_an_error_in_the_windows_health(tmp_path):
    out = run(tmp_path, "unsubscribe_fails")
    assert out["summary"]["errors"] == 3 and len(out["finalized_on"]) == 3 == out["finalizes"]  # each finalize still ran
    assert sum(n for n, _ in out["health_errors"]) == 3
    assert all("finalize: unsubscribe" in why and "status 42" in why for _, why in out["health_errors"])


def test_a_bad_value_stops_the_tracer_before_it_attaches(tmp_path):
    """The session builds the tracer inside its try (see test_drain): the collector goes off with the reason."""
    out = run(tmp_path, "bad_env", CUDAWATCH_FINALIZE="sometimes")
    assert "CUDAWATCH_FINALIZE" in out["error"] and "'sometimes'" in out["error"]


# ---- in-process checks of one round at a time ------------------------------------------------------
@pytest.fixture
def fake_cupti(monkeypatch):
    """The stand-in module, loaded fresh in this process as ``cupti.cupti``."""
    mod = types.ModuleType("cupti.cupti")
    exec(FAKE_CUPTI, mod.__dict__)
    pkg = types.ModuleType("cupti")
    pkg.cupti = mod
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setitem(sys.modules, "cupti.cupti", mod)
    return mod


def _application(fake_cupti, until: threading.Event, name: str = "app") -> threading.Thread:
    """A started application thread making a CUDA call every 0.5 ms until ``until`` is set."""
    def calls():
        while not until.is_set():
            fake_cupti.api_call()
            time.sleep(0.0005)
    app = threading.Thread(target=calls, name=name)
    app.start()
    return app


def test_a_late_callback_of_an_old_generation_cannot_complete_a_new_round(fake_cupti, monkeypatch):
    """Round 1: a callback claims and its cuptiFinalize hangs past the collector's limit (RuntimeError).
    Round 2: that old callback returns while round 2 is armed; round 2 must not report "callback"
    (no finalize of its own ran) but finalize after its timeout."""
    import collector.finalize as F

    monkeypatch.setattr(F, "STARTED_LIMIT_S", 0.05)
    release, entered = threading.Event(), threading.Event()
    real_finalize = fake_cupti.finalize

    def slow_finalize():
        if threading.current_thread().name == "old-app":
            entered.set()
            release.wait(10)
        real_finalize()
    fake_cupti.finalize = slow_finalize
    f = DetachFinalizer("callback", timeout_s=0.2)

    app = _application(fake_cupti, entered, "old-app")  # its first API exit while armed claims round 1
    with pytest.raises(RuntimeError, match="did not return"):
        f.finalize()
    assert entered.is_set() and f.completed == 0  # started, not returned: not (yet) a finalize done
    result = {}
    r2 = threading.Thread(target=lambda: result.update(how=f.finalize()), name="collector")
    r2.start()
    deadline = time.monotonic() + 5
    while f._state != "armed" and time.monotonic() < deadline:
        time.sleep(0.001)
    release.set()  # the old callback finishes now, while round 2 is armed
    app.join(5)
    r2.join(5)
    assert result["how"] == "timeout"
    s = f.summary()
    assert s["in_callback"] == 1 and s["by_timeout"] == 1
    assert fake_cupti.finalized_on == ["old-app", "collector"]
    # round 1's finalize returned after its detach had raised: counted once it returned (the tracer's
    # ``finalizes``, the status file's cupti_finalizes_total, read this count)
    assert s["completed"] == 2


def test_ctrl_c_in_the_wait_finalizes_before_it_propagates(fake_cupti):
    """SIGINT to the main thread while it waits for an API exit (Session.stop): the subscription is
    claimed, unsubscribed and finalized, then KeyboardInterrupt propagates."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    f = DetachFinalizer("callback", timeout_s=5.0)
    # Ctrl-C as Python delivers it by default: a test run earlier in this worker may have left a
    # handler of its own on SIGINT (CI once read "DID NOT RAISE" here; the file alone passes)
    prev = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            f.finalize()
    finally:
        signal.signal(signal.SIGINT, prev)
    assert time.monotonic() - t0 < 4
    assert fake_cupti.calls[-2:] == ["unsubscribe", "finalize"] and fake_cupti.state["subscriber"] is None
    s = f.summary()
    assert s["fallback"] == 1 and "KeyboardInterrupt" in s["last_fallback"] and f._state == "idle"
    fake_cupti.api_call()  # a later API exit does nothing
    assert fake_cupti.calls.count("finalize") == 1


def test_a_failing_finalize_is_counted_with_its_reason(fake_cupti):
    def broken():
        raise fake_cupti.cuptiError(99)
    fake_cupti.finalize = broken
    fake_cupti.state["refuse_subscribe"] = True
    f = DetachFinalizer("callback", timeout_s=0.01)
    with pytest.raises(fake_cupti.cuptiError):
        f.finalize()
    fake_cupti.state["refuse_subscribe"] = False
    with pytest.raises(fake_cupti.cuptiError):
        f.finalize()  # idle: the timeout path
    s = f.summary()
    assert s["fallback"] == 1 and "subscribe" in s["last_fallback"]
    assert s["by_timeout"] == 1 and s["errors"] == 2 and "status 99" in s["last_error"]
    assert f.take_unraised() == []  # both raised: the session counts them, nothing is handed on twice


def test_a_failure_the_finalize_survives_is_handed_on_once(fake_cupti):
    """A failed cuptiUnsubscribe: the finalize still runs (it ends every subscription), the failure
    is counted and handed to the tracer once for the window's health, never only in summary()."""
    def broken(h):
        raise fake_cupti.cuptiError(42)
    fake_cupti.unsubscribe = broken
    f = DetachFinalizer("callback", timeout_s=0.01)
    assert f.finalize() == "timeout"  # idle: the collector's thread unsubscribes (fails) and finalizes
    assert fake_cupti.calls[-1] == "finalize"
    unraised = f.take_unraised()
    assert len(unraised) == 1 and "unsubscribe" in unraised[0] and "status 42" in unraised[0]
    assert f.take_unraised() == []
    assert f.summary()["errors"] == 1


def test_a_callback_failing_before_its_finalize_is_handed_on(fake_cupti):
    """The API callback fails before cuptiFinalize (a BaseException out of its unsubscribe, which
    ``_unsubscribe`` does not survive): the collector's thread finalizes (fallback), and the
    callback's failure reaches health through take_unraised."""
    def unsubscribe(h):
        if threading.current_thread().name == "app":
            raise KeyboardInterrupt("in the callback")
    fake_cupti.unsubscribe = unsubscribe
    f = DetachFinalizer("callback", timeout_s=2.0)

    returned = threading.Event()
    app = _application(fake_cupti, returned)
    how = f.finalize()
    returned.set()
    app.join(5)
    assert how == "fallback" and f.summary()["fallback"] == 1
    assert fake_cupti.finalized_on == [threading.current_thread().name]  # the fallback, on the collector's thread
    unraised = f.take_unraised()
    assert len(unraised) == 1 and "API callback" in unraised[0] and "KeyboardInterrupt" in unraised[0]


def test_a_callback_failing_after_the_collector_stopped_waiting_is_handed_on(fake_cupti, monkeypatch):
    """The callback claimed the round, its cuptiFinalize outlives STARTED_LIMIT_S (the collector raises)
    and then fails: nobody is left to raise it, so it is handed on for health."""
    import collector.finalize as F

    monkeypatch.setattr(F, "STARTED_LIMIT_S", 0.05)
    entered, release = threading.Event(), threading.Event()

    def slow_failing_finalize():
        entered.set()
        release.wait(10)
        raise fake_cupti.cuptiError(13)
    fake_cupti.finalize = slow_failing_finalize
    f = DetachFinalizer("callback", timeout_s=0.2)

    app = _application(fake_cupti, entered)
    with pytest.raises(RuntimeError, match="did not return"):
        f.finalize()
    assert f.take_unraised() == []
    release.set()
    app.join(5)
    unraised = f.take_unraised()
    assert len(unraised) == 1 and "after the collector stopped waiting" in unraised[0] and "status 13" in unraised[0]
    assert f.completed == 0  # it failed: no finalize done
