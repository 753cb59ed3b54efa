"""The collector inside real processes: no-GPU path, SIGTERM/exit flush, `cudawatch collect`, imports.

On this CPU machine there is no driver, so a plain start takes the no-GPU path. The flush tests run
the real session (control loop, windows, spool, rotation, signal handling) with
``CUDAWATCH_REPLAY`` feeding it the CUPTI records recorded on the H200.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cudawatch.shards import list_shards, read_shard

from .conftest import RECORDS, REPO


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _cli(*args, env=None, cwd=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "cudawatch", *args], capture_output=True, text=True,
                          env=env or _env(), cwd=cwd or REPO, timeout=timeout)


def _no_gpu_here():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False


no_gpu = pytest.mark.skipif(not _no_gpu_here(), reason="this test checks the path taken without an NVIDIA driver")


@no_gpu
def test_collect_without_gpu_runs_program_warns_once_and_passes_exit_code(tmp_path):
    prog = "import sys, subprocess; print('child ran'); subprocess.run([sys.executable, '-c', 'pass']); sys.exit(7)"
    p = _cli("collect", "--job", "nogpu", "--out", str(tmp_path / "shards"), "--", sys.executable, "-c", prog)
    assert p.returncode == 7
    assert "child ran" in p.stdout
    warnings = [line for line in p.stderr.splitlines() if line.startswith("cudawatch:")]
    assert len(warnings) == 1, p.stderr  # the grandchild inherits the 'warned' mark
    assert "no NVIDIA driver" in warnings[0] and "runs without collection" in warnings[0]
    assert list_shards(tmp_path / "shards") == []


def test_collect_reports_signal_death_like_a_shell(tmp_path):
    prog = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    p = _cli("collect", "--out", str(tmp_path), "--", sys.executable, "-c", prog)
    assert p.returncode == 128 + signal.SIGKILL


def test_collect_needs_a_command():
    p = _cli("collect")
    assert p.returncode == 2 and "no command given" in p.stderr


def test_collect_runs_the_users_own_sitecustomize(tmp_path):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(user)])
    prog = "import os, sys; sys.exit(0 if os.environ.get('USER_SITECUSTOMIZE') == 'ran' else 5)"
    p = _cli("collect", "--out", str(tmp_path / "s"), "--", sys.executable, "-c", prog, env=env)
    assert p.returncode == 0, p.stderr


@no_gpu
def test_library_api_without_gpu_is_inactive_with_a_reason(tmp_path):
    code = textwrap.dedent(f"""
        import collector
        with collector.collecting(job="lib", out={str(tmp_path)!r}) as s:
            print("active", s.active)
            print("reason", s.reason)
        collector.stop()
        print("done")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "active False" in p.stdout and "done" in p.stdout and "no NVIDIA driver" in p.stdout
    assert p.stderr.count("cudawatch:") == 1


def _replay_child(tmp_path, body: str, **env):
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        import collector
        {body}
        s = collector.start(job="replayed", out={str(tmp_path)!r})
        assert s.active, s.reason
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(CUDAWATCH_REPLAY=RECORDS, CUDAWATCH_REPLAY_SPEED=8, CUDAWATCH_WINDOW_S=1, **env), cwd=REPO)


def _wait_ready(proc, seconds=3.0):
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(seconds)


def _launches(root):
    return sum(sum(read_shard(p).column("launches").to_pylist()) for p in list_shards(root, "kernels"))


def test_sigterm_flushes_and_keeps_default_termination(tmp_path):
    proc = _replay_child(tmp_path, "", CUDAWATCH_ADAPTIVE=0)  # tracing all the time: records are in flight at SIGTERM
    _wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # default action re-raised after the flush
    assert _launches(tmp_path) > 0
    assert list_shards(tmp_path, "health")
    assert not any((tmp_path / ".spool").rglob("*.parquet"))


def test_sigterm_chains_the_users_handler(tmp_path):
    body = "signal.signal(signal.SIGTERM, lambda *a: (print('user handler', flush=True), sys.exit(3)))"
    proc = _replay_child(tmp_path, body, CUDAWATCH_ADAPTIVE=0)
    _wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 3 and "user handler" in out
    assert _launches(tmp_path) > 0


def test_sigkill_loses_at_most_the_open_window_and_recover_finds_the_rest(tmp_path):
    from collector.spool import recover

    proc = _replay_child(tmp_path, "", CUDAWATCH_ADAPTIVE=0)  # full tracing: windows fill from the first second
    _wait_ready(proc, seconds=9.0)
    proc.kill()
    proc.wait(timeout=10)
    assert list_shards(tmp_path, "kernels") == []  # the hour is not over: windows sit in the spool
    recover(tmp_path)
    assert _launches(tmp_path) > 0


def test_exit_flush_writes_shards(tmp_path):
    code = textwrap.dedent(f"""
        import time, collector
        s = collector.start(job="atexit", out={str(tmp_path)!r})
        t0 = time.time()  # exit once records reached the aggregator (a loaded machine may take longer than 2 s)
        while s.tracer.kernels + s.tracer.copies == 0 and time.time() - t0 < 30:
            time.sleep(0.1)
        print("delivered", s.tracer.kernels + s.tracer.copies)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                       env=_env(CUDAWATCH_REPLAY=RECORDS, CUDAWATCH_REPLAY_SPEED=8, CUDAWATCH_WINDOW_S=1))
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split()[-1]) > 0, p.stdout
    rows = [r for f in list_shards(tmp_path, "health") for r in read_shard(f).to_pylist()]
    assert rows and all(r["job"] == "atexit" for r in rows)
    assert sum(r["records"] for r in rows) > 0


def test_collector_imports_stay_light():
    code = ("import sys, collector, collector.cli, collector.session, collector.aggregate, collector.rows, "
            "collector.spool, collector.agent, collector.control, collector.launcher, collector.doctor, collector.replay\n"
            "heavy = sorted(m for m in ('duckdb', 'scipy', 'airflow', 'cupti', 'torch') if m in sys.modules)\n"
            "print(heavy)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_duty_log_is_written_at_exit_and_bounded(tmp_path):
    """CUDAWATCH_DUTY_LOG gets one row per on-phase with the fields it names; the log keeps only the
    last DUTY_LOG_MAX on-phases (set to 2 here), so a collector left on for weeks does not grow it.
    A 100 % budget keeps the control period near its 0.5 s floor, so 4.5 s hold several on-phases."""
    log = tmp_path / "duty.json"
    code = textwrap.dedent(f"""
        import time, collector, collector.session as cs
        cs.DUTY_LOG_MAX = 2
        s = collector.start(job="duty", out={str(tmp_path / 'shards')!r})
        time.sleep(4.5)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                       env=_env(CUDAWATCH_REPLAY=RECORDS, CUDAWATCH_REPLAY_SPEED=8, CUDAWATCH_WINDOW_S=1,
                                CUDAWATCH_PERIOD_S=0.5, CUDAWATCH_MAX_OVERHEAD_PCT=100, CUDAWATCH_DUTY_LOG=str(log)))
    assert p.returncode == 0, p.stderr
    from collector.session import DUTY_LOG_FIELDS

    data = json.loads(log.read_text())
    assert data["fields"] == list(DUTY_LOG_FIELDS) and data["job"] == "duty"
    assert len(data["rows"]) == 2 and all(len(r) == len(DUTY_LOG_FIELDS) for r in data["rows"])
    off_at = [r[0] for r in data["rows"]]
    assert off_at == sorted(off_at) and off_at[-1] - off_at[0] > 0  # the newest two, in order
    health = [r for f in list_shards(tmp_path / "shards", "health") for r in read_shard(f).to_pylist()]
    assert 0 < sum(r[DUTY_LOG_FIELDS.index("records")] for r in data["rows"]) <= sum(r["records_delivered"] for r in health)


def test_each_hour_becomes_one_shard_per_table(tmp_path, monkeypatch, records):
    """The session closes a window two control periods after it ended, so the last window of an hour
    is closed after the hour is over; the hour is combined only then, into one shard per table (it
    was combined at the hour's end, and its last window became a second shard a minute later)."""
    from collector.session import Session

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    s = Session(job="hours", out=tmp_path).start()
    assert s.active, s.reason
    s._stop_evt.set()
    s._thread.join()  # the control loop is stopped; its close-and-rotate step is driven below
    kernels, _ = records
    t0 = min(k[0] for k in kernels)
    first = 1_900_000_800  # 2030-03-17 18:00 UTC, a whole hour
    for i in range(120):  # two hours of 60-s windows
        shift = (first + i * 60 + 5) * 10**9 - t0 - s.agg.clock_offset_ns
        s.agg.add_kernels([(a + shift, b + shift, sig) for a, b, sig in kernels])
        for half in (0, 30):  # the control loop runs the step once a period (30 s at most)
            s._close_windows(first + (i + 1) * 60 + half + 1)
    s.stop()
    hours = {}
    for f in list_shards(tmp_path, "kernels"):
        t = read_shard(f)
        if t.column("window_start")[0].as_py().year == 2030:
            hours.setdefault(f.parent.name, []).append(t)
    assert sorted(hours) == ["hour=18", "hour=19"]
    assert [len(v) for _, v in sorted(hours.items())] == [1, 1]
    assert sum(sum(t.column("launches").to_pylist()) for v in hours.values() for t in v) == 120 * len(kernels)


def test_duty_log_rows_carry_the_pause_drain_under_their_names(tmp_path, monkeypatch):
    """Each on-phase row gets the drain's (wait, records without timestamps) of its own pause, in the
    columns DUTY_LOG_FIELDS names (a replay never waits, so the drain reports a known pair here)."""
    from collector.session import DUTY_LOG_FIELDS, Session

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setenv("CUDAWATCH_REPLAY_SPEED", "8")
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "0.5")
    monkeypatch.setenv("CUDAWATCH_MAX_OVERHEAD_PCT", "100")
    pairs = iter([(0.031, 7), (0.062, 0)] + [(0.0, 0)] * 1000)
    monkeypatch.setattr("collector.drain.DetachDrain.take_last", lambda self: next(pairs))
    s = Session(job="drain-cols", out=tmp_path).start()
    assert s.active, s.reason
    time.sleep(2.5)
    s.stop()
    rows = [dict(zip(DUTY_LOG_FIELDS, r)) for r in s.duty_log]
    got = [(r["drain_wait_s"], r["zero_ts"]) for r in rows]
    assert got[:2] == [(0.031, 7), (0.062, 0)]
    assert all(isinstance(r["records"], int) and r["period_s"] > 0 for r in rows)


def _stuck_session(tmp_path, monkeypatch, where: str):
    """A replay session whose collector thread blocks (until released) in its first detach (``where`` =
    "detach": inside a CUPTI call sequence, holding the tracer's lock), in a flush of a session that
    traces all the time ("flush": holding it, and no detach follows in the loop) or in closing windows ("spool": not in CUPTI)."""
    import threading

    from collector import session as session_mod
    from collector.replay import ReplayTracer

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setattr(session_mod, "STOP_JOIN_S", 0.2)
    entered, release, finals, dropped_on, fences = threading.Event(), threading.Event(), [], [], []
    detach, dropped, flush = ReplayTracer.detach, ReplayTracer.dropped, ReplayTracer.flush
    close = session_mod.Session._close_windows

    def block():
        entered.set()
        release.wait(10)

    def stuck_detach(self, *, final=False, fence=True):
        finals.append(final)
        fences.append(fence)
        with self.op_lock:  # what CuptiTracer's methods hold while in CUPTI
            if not final and where == "detach":
                block()
            detach(self, final=final, fence=fence)

    def stuck_flush(self, force=True):
        with self.op_lock:
            if where == "flush" and not force and not entered.is_set():
                block()
            flush(self, force)

    def stuck_close(self, now):
        if where == "spool" and not entered.is_set():
            block()
        close(self, now)

    def recording_dropped(self):
        dropped_on.append(threading.current_thread() is threading.main_thread())
        return dropped(self)

    monkeypatch.setattr(ReplayTracer, "detach", stuck_detach)
    monkeypatch.setattr(ReplayTracer, "dropped", recording_dropped)
    monkeypatch.setattr(ReplayTracer, "flush", stuck_flush)
    monkeypatch.setattr(session_mod.Session, "_close_windows", stuck_close)
    s = session_mod.Session(job="stuck", out=tmp_path, window_s=1, budget_pct=2.0, adaptive=where != "flush").start()
    s.tracer.fences = fences  # each detach's fence argument, for the tests that look
    return s, entered, release, finals, dropped_on


def test_a_stop_while_the_thread_is_stuck_in_a_cupti_call_leaves_cupti_to_it(tmp_path, monkeypatch):
    """A detach blocked in a driver call past the join timeout: stop() must not run a second detach
    (or ask CUPTI anything) beside it, but count why, and still write shards."""
    s, entered, release, finals, dropped_on = _stuck_session(tmp_path, monkeypatch, "detach")
    try:
        assert s.active and entered.wait(20)
        errors0 = s.errors
        s.stop()
        assert finals == [False]  # no final detach beside the stuck one
        assert True not in dropped_on  # nor a dropped-records query from stop()
        assert s.errors == errors0 + 1 and not s.active
        health = [r for f in list_shards(tmp_path, "health") for r in read_shard(f).to_pylist()]
        assert any("still in a CUPTI or driver call after 0.2 s" in (r.get("last_error") or "") for r in health)
    finally:
        release.set()
        s._thread.join(5)


def test_a_stop_while_the_thread_is_stuck_outside_cupti_still_detaches(tmp_path, monkeypatch):
    """Stuck writing the spool (a hung file system), not in CUPTI: the final detach runs as usual."""
    s, entered, release, finals, _ = _stuck_session(tmp_path, monkeypatch, "spool")
    try:
        assert s.active and entered.wait(20)
        s.stop()
        assert finals and finals[-1] is True and s._thread.is_alive() and not s.tracer.attached
    finally:
        release.set()
        s._thread.join(5)


def test_a_thread_stuck_in_a_cupti_call_detaches_itself_once_it_returns(tmp_path, monkeypatch):
    """Stuck in an unforced flush of a session tracing all the time: stop() leaves CUPTI alone, and
    the thread, once the call returns, detaches at its end instead of leaving CUPTI attached."""
    s, entered, release, finals, _ = _stuck_session(tmp_path, monkeypatch, "flush")
    try:
        assert s.active and entered.wait(20)
        s.stop()
        assert finals == [] and s.tracer.attached  # nothing beside the stuck flush
    finally:
        release.set()
        s._thread.join(5)
    assert finals == [True] and not s.tracer.attached
    assert s.tracer.fences == [False]  # the late detach asks for no fence: the program may be tearing down


def test_the_status_file_for_the_node_agent_and_a_failure_to_write_it(tmp_path, monkeypatch):
    """``collector.status.write_status``: the JSON the agent exports (totals, not running after stop);
    a status folder that cannot be made is counted in the errors and named in a window's health."""
    from collector import session as session_mod

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setenv("CUDAWATCH_REPLAY_SPEED", "8")
    ok, bad = tmp_path / "ok", tmp_path / "bad"
    bad.mkdir()
    (bad / ".status").write_text("a file where the folder should be")
    for out in (ok, bad):
        # tracing all the time at a 1-s period, windows close while it runs (grace 3 s): a failed
        # write there is noted in a window still open, so it reaches the shards
        s = session_mod.Session(job="status", out=out, window_s=1, adaptive=False).start()
        time.sleep(5 if out is bad else 1)
        s.stop()
        health = [r for f in list_shards(out, "health") for r in read_shard(f).to_pylist()]
        failed = [r for r in health if "writing the status file" in (r.get("last_error") or "")]
        if out is ok:
            [path] = (out / ".status").glob("*.json")
            status = json.loads(path.read_text())
            assert status["job"] == "status" and status["running"] is False and status["records"] > 0
            assert status["records_delivered_total"] >= status["records_valid_total"] > 0 and not failed
            assert status["cupti_host_buffers_held_max"] == 0  # a replay hands CUPTI no buffers
            assert status["cupti_finalizes_total"] == s.tracer.finalizes == 1  # traced all the time: the stop's detach only
        else:
            assert failed and s.errors >= 2  # one while running, one at the stop (after the last shards)


def test_an_interrupt_in_the_last_detach_still_writes_the_windows_then_propagates(tmp_path, monkeypatch):
    """A second Ctrl-C while the last detach fences (up to collector.drain.FINAL_MAX_S): stop() writes
    the windows it holds and counts the failed detach, then the interrupt goes on to the program."""
    from collector.session import Session

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setenv("CUDAWATCH_REPLAY_SPEED", "8")
    s = Session(job="interrupted", out=tmp_path, window_s=1).start()
    assert s.active, s.reason
    time.sleep(1.5)  # some windows open
    real_detach = s.tracer.detach

    def interrupted(*, final=False):
        if final:
            raise KeyboardInterrupt
        real_detach(final=final)

    s.tracer.detach = interrupted
    errors0 = s.errors
    with pytest.raises(KeyboardInterrupt):
        s.stop()
    assert not s.active and s.errors == errors0 + 1
    health = [r for f in list_shards(tmp_path, "health") for r in read_shard(f).to_pylist()]
    assert health and any("final flush/detach: KeyboardInterrupt" in (r.get("last_error") or "") for r in health)


def test_the_session_windows_follow_its_period_and_a_contradiction_turns_it_off(tmp_path, monkeypatch):
    from collector.session import Session

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "120")
    s = Session(job="long-period", out=tmp_path)
    assert (s.window_s, s.period_s, s.controller.max_period_s) == (120, 120.0, 120.0)
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "60")
    s = Session(job="contradiction", out=tmp_path).start()
    assert not s.active and "CUDAWATCH_PERIOD_S=120 is longer than the window (CUDAWATCH_WINDOW_S=60)" in s.reason
    s.stop()


def test_a_bad_host_buffer_size_turns_the_collector_off_not_the_program(tmp_path, monkeypatch):
    from collector.session import Session

    monkeypatch.setenv("CUDAWATCH_REPLAY", str(RECORDS))
    for bad in ("big", "16"):  # not a number; below 64 KiB: both messages name the variable
        monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", bad)
        s = Session(job="bad-buffer", out=tmp_path).start()
        assert not s.active and "CUDAWATCH_HOST_BUFFER_KIB" in s.reason
        s.stop()
