"""Where a detach's cuptiFinalize runs (collector.finalize): configuration, and with the stand-in
``cupti`` module of test_drain, the callback path (an application thread's API exit), the timeout
path (an idle application), the fallback when CUPTI refuses a subscriber, and exactly-once under a
race between the two. Whether it removes the H200 segfault is for the GPU to show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from collector.finalize import DEFAULT_TIMEOUT_S, DetachFinalizer, finalize_mode

from .conftest import REPO
from .test_drain import FAKE_CUPTI


def test_thread_is_the_default_and_callback_is_opt_in(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_FINALIZE", raising=False)
    assert finalize_mode() == "thread" and DetachFinalizer().mode == "thread"
    monkeypatch.setenv("CUDAWATCH_FINALIZE", "")
    assert finalize_mode() == "thread"
    monkeypatch.setenv("CUDAWATCH_FINALIZE", "callback")
    f = DetachFinalizer()
    assert f.mode == "callback" and f.timeout_s == DEFAULT_TIMEOUT_S
    assert f.summary() == {"mode": "callback", "in_thread": 0, "in_callback": 0, "by_timeout": 0, "fallback": 0,
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
    stop = threading.Event()

    def app():  # the application thread: CUDA calls every 0.5 ms (race: at random 0-6 ms gaps)
        while not stop.is_set():
            cupti.api_call()
            time.sleep(random.uniform(0, 0.006) if scenario == "race" else 0.0005)

    app_thread = threading.Thread(target=app, name="app")
    if scenario not in ("idle", "late"):
        app_thread.start()
    if scenario == "late":  # the only API exit comes right after the collector's wait timed out

        class LateEvent(threading.Event):
            def wait(self, timeout=None):
                if timeout == timeout_s:
                    late = threading.Thread(target=cupti.api_call, name="app")
                    late.start()
                    late.join()
                    return False
                return super().wait(timeout)
        t.finalizer._done = LateEvent()
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
            t.detach()
            out["detach_s"].append(time.perf_counter() - t0)
            out["calls"].append(list(cupti.calls))
    c = threading.Thread(target=collector, name="collector")
    c.start()
    c.join(60)
    stop.set()
    if app_thread.ident is not None:
        app_thread.join(10)
    out.update(finalized_on=cupti.finalized_on, finalized_at=cupti.finalized_at, overlaps=cupti.state["overlaps"],
               summary=t.finalizer.summary(), attached=t.attached, subscriber_left=cupti.state["subscriber"] is not None)
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


def test_the_first_api_exit_on_an_application_thread_finalizes_once(tmp_path):
    out = run(tmp_path, "callback")
    assert out["how"] == ["callback"] * 3
    assert out["finalized_on"] == ["app"] * 3  # exactly once per detach, never on the collector's thread
    assert out["finalized_at"] == [1] * 3  # inside the API_EXIT callback, never at API_ENTER
    assert out["summary"]["in_callback"] == 3 and out["summary"]["by_timeout"] == out["summary"]["fallback"] == 0
    assert out["summary"]["errors"] == 0 and out["overlaps"] == 0
    # the forced flush before the subscription: nothing for the buffer callback when finalize runs
    for calls in out["calls"]:
        assert calls == ["disable"] * 4 + ["flush", "flush_forced", "subscribe", "enable_domain", "enable_domain",
                                           "unsubscribe", "finalize"]
    assert max(out["detach_s"]) < DEFAULT_TIMEOUT_S
    assert not out["attached"] and not out["subscriber_left"]


def test_an_idle_application_is_finalized_by_the_collector_after_the_timeout(tmp_path):
    out = run(tmp_path, "idle")
    assert out["how"] == ["timeout"] * 3
    assert out["finalized_on"] == ["collector"] * 3 and out["finalized_at"] == [None] * 3
    assert out["summary"]["by_timeout"] == 3 and out["summary"]["in_callback"] == 0
    assert min(out["detach_s"]) >= DEFAULT_TIMEOUT_S
    assert out["calls"][0][-2:] == ["unsubscribe", "finalize"] and out["overlaps"] == 0
    assert not out["subscriber_left"]


def test_a_refused_subscriber_falls_back_to_the_thread_finalize_and_counts_it(tmp_path):
    out = run(tmp_path, "refused")
    assert out["how"] == ["fallback"] * 3
    assert out["finalized_on"] == ["collector"] * 3
    s = out["summary"]
    assert s["fallback"] == 3 and s["in_callback"] == s["by_timeout"] == 0
    assert "subscribe" in s["last_fallback"] and "status 1" in s["last_fallback"]  # ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    assert out["calls"][0] == ["disable"] * 4 + ["flush", "flush_forced", "finalize"]
    assert not out["attached"]


def test_callback_and_timeout_racing_still_finalize_exactly_once(tmp_path):
    """A 3 ms timeout against API calls 0-6 ms apart: both paths win some detaches; every detach
    finalizes once, and no CUPTI call overlaps a finalize."""
    out = run(tmp_path, "race")
    s = out["summary"]
    assert len(out["finalized_on"]) == 200 and s["in_callback"] + s["by_timeout"] == 200
    assert s["in_callback"] > 0 and s["by_timeout"] > 0
    assert out["overlaps"] == 0 and s["errors"] == 0
    assert all(calls.count("finalize") == 1 for calls in out["calls"])


def test_an_exit_just_after_the_timeout_is_finalized_by_its_callback_alone(tmp_path):
    out = run(tmp_path, "late")
    assert out["how"] == ["callback"] * 3 and out["finalized_on"] == ["app"] * 3
    assert out["summary"]["in_callback"] == 3 and out["summary"]["by_timeout"] == 0 and out["overlaps"] == 0


def test_a_bad_value_stops_the_tracer_before_it_attaches(tmp_path):
    """The session builds the tracer inside its try (see test_drain): the collector goes off with the reason."""
    out = run(tmp_path, "bad_env", CUDAWATCH_FINALIZE="sometimes")
    assert "CUDAWATCH_FINALIZE" in out["error"] and "'sometimes'" in out["error"]
