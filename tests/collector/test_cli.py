"""`cudawatch doctor`, `agent --interval` parsing and the job label."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from collector.cli import _seconds
from collector.launcher import default_job
from collector.session import job_name

from .conftest import REPO


@pytest.mark.parametrize("text,expected", [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("0.25", 0.25)])
def test_interval_parsing(text, expected):
    assert _seconds(text) == expected


@pytest.mark.parametrize("text", ["fast", "-1s", "0s", "1h"])
def test_bad_interval_is_a_clear_error(text):
    with pytest.raises(typer.BadParameter):
        _seconds(text)


def test_job_label_precedence(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_JOB", raising=False)
    monkeypatch.setenv("SLURM_JOB_NAME", "slurm-job")
    assert job_name("explicit") == "explicit"
    assert job_name(None) == "slurm-job"
    monkeypatch.setenv("CUDAWATCH_JOB", "env-job")
    assert job_name(None) == "env-job"
    assert default_job(["python", "-u", "/x/train.py", "--lr", "1"]) == "train.py"
    assert default_job(["python", "-m", "pkg.train"]) == "pkg.train"
    assert default_job(["/usr/bin/torchrun", "--nproc", "8"]) == "torchrun"


def _env(**extra) -> dict:
    """This environment without any CUDAWATCH_ variable: not the settings of the test's own process,
    nor the 'warned' mark (CUDAWATCH_WARNED) an earlier in-process collector in this worker left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def test_doctor_reports_each_check_and_fails_without_a_driver():
    env = _env()
    p = subprocess.run([sys.executable, "-m", "cudawatch", "doctor"], capture_output=True, text=True, env=env, cwd=REPO)
    lines = p.stdout.splitlines()
    names = [line.split("] ", 1)[1].split(":")[0] for line in lines]
    assert {"CUDA driver", "CUPTI", "overhead budget", "shard root"} <= set(names)
    assert any(n.startswith("NVML") for n in names)
    has_driver = "[  ok] CUDA driver" in p.stdout
    assert p.returncode == (0 if has_driver and "[fail]" not in p.stdout else 1)
    assert "[  ok] overhead budget: CUDAWATCH_MAX_OVERHEAD_PCT=2.0 %" in p.stdout


def test_doctor_flags_a_bad_budget():
    env = _env(CUDAWATCH_MAX_OVERHEAD_PCT="250")
    p = subprocess.run([sys.executable, "-m", "cudawatch", "doctor"], capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 1 and "[fail] overhead budget" in p.stdout


def _config_check(name: str):
    """The one check of ``check_config`` with that name."""
    from collector.doctor import check_config

    (found,) = [c for c in check_config() if c.name == name]
    return found


def test_doctor_reports_the_host_buffer_size_and_fails_a_bad_one(monkeypatch):
    monkeypatch.delenv("CUDAWATCH_HOST_BUFFER_KIB", raising=False)
    assert _config_check("CUPTI host buffers").detail.startswith("1024 KiB each")  # the default
    monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", "256")
    ok = _config_check("CUPTI host buffers")
    assert ok.status == "ok" and ok.detail.startswith("256 KiB each")
    monkeypatch.setenv("CUDAWATCH_HOST_BUFFER_KIB", "16")
    bad = _config_check("CUPTI host buffers")
    assert bad.status == "fail" and "64 KiB" in bad.detail


def test_doctor_reports_the_windows_and_fails_a_period_longer_than_the_window(monkeypatch):
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "120")
    monkeypatch.delenv("CUDAWATCH_WINDOW_S", raising=False)
    ok = _config_check("windows")
    assert ok.status == "ok" and ok.detail.startswith("120 s windows, control period 120-120 s, at most 30 s until an on-phase")
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "60")
    bad = _config_check("windows")
    assert bad.status == "fail" and "longer than the window" in bad.detail


def test_doctor_reports_the_gpu_memory_the_cycles_keep_a_day(monkeypatch):
    for name in ("CUDAWATCH_OFF_MODE", "CUDAWATCH_ADAPTIVE", "CUDAWATCH_WINDOW_S", "CUDAWATCH_MAX_OVERHEAD_PCT", "CUDAWATCH_PERIOD_S"):
        monkeypatch.delenv(name, raising=False)
    c = _config_check("CUPTI cycles")  # the default: 30 s, 2,880 cycles x 0.586 MiB
    assert c.status == "ok" and c.detail.startswith("one detach/attach cycle every 30 s: at most 2,880 a day, keeping ~1,688 MiB")
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "300")
    assert "every 300 s (every 30 s until an on-phase traced something): at most 288 a day, keeping ~169 MiB" in _config_check("CUPTI cycles").detail
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "1")
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "10")  # cycling would need 30 s; the window caps the period at 10
    assert "every 10 s: at most 8,640 a day" in _config_check("CUPTI cycles").detail
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "60")
    monkeypatch.setenv("CUDAWATCH_MAX_OVERHEAD_PCT", "4")  # cycles cost a quarter of 4 % at 15 s; slower ones stretch it
    assert "every 15 s or more (slower cycles stretch it): at most 5,760 a day" in _config_check("CUPTI cycles").detail
    monkeypatch.setenv("CUDAWATCH_MAX_OVERHEAD_PCT", "2")
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "300")
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "300")
    monkeypatch.setenv("CUDAWATCH_OFF_MODE", "disable")
    assert _config_check("CUPTI cycles").detail.startswith("none: CUDAWATCH_OFF_MODE=disable stays attached")
    monkeypatch.setenv("CUDAWATCH_ADAPTIVE", "0")
    assert _config_check("CUPTI cycles").detail.startswith("none: CUDAWATCH_ADAPTIVE=0 traces all the time")
    monkeypatch.delenv("CUDAWATCH_OFF_MODE")
    monkeypatch.delenv("CUDAWATCH_ADAPTIVE")
    monkeypatch.setenv("CUDAWATCH_WINDOW_S", "60")  # shorter than the period: one fail line (windows), no cycles line
    from collector.doctor import check_config

    names = [(c.name, c.status) for c in check_config()]
    assert ("windows", "fail") in names and "CUPTI cycles" not in [n for n, _ in names]


def test_doctor_reads_the_start_up_period_and_the_pause_mode_as_the_session_does(monkeypatch):
    """At a 1 % budget cycling needs 60 s, so a 120-s period starts at 60 s, not 30 (DutyController.
    start_period_s); a pause mode the session would refuse fails here too; a bad budget fails once."""
    from collector.doctor import check_config

    for name in ("CUDAWATCH_OFF_MODE", "CUDAWATCH_ADAPTIVE", "CUDAWATCH_WINDOW_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDAWATCH_PERIOD_S", "120")
    monkeypatch.setenv("CUDAWATCH_MAX_OVERHEAD_PCT", "1")
    assert ", at most 60 s until an on-phase traced something" in _config_check("windows").detail
    assert "every 120 s (every 60 s until an on-phase traced something): at most 720 a day" in _config_check("CUPTI cycles").detail
    monkeypatch.setenv("CUDAWATCH_OFF_MODE", "sometimes")
    bad = _config_check("CUPTI cycles")
    assert bad.status == "fail" and "CUDAWATCH_OFF_MODE='sometimes' must be one of detach, disable" in bad.detail
    monkeypatch.delenv("CUDAWATCH_OFF_MODE")
    monkeypatch.setenv("CUDAWATCH_MAX_OVERHEAD_PCT", "250")
    checks = {c.name: c for c in check_config()}
    assert checks["overhead budget"].status == "fail" and checks["windows"].status == "ok"
    assert "until an on-phase" not in checks["windows"].detail and "CUPTI cycles" not in checks


def test_a_pause_mode_the_collector_does_not_know_turns_it_off_with_the_variable_named(tmp_path):
    from cudawatch.config import ConfigError, collector_off_mode

    assert collector_off_mode({}) == "detach" and collector_off_mode({"CUDAWATCH_OFF_MODE": "disable"}) == "disable"
    with pytest.raises(ConfigError, match="CUDAWATCH_OFF_MODE='bogus'"):
        collector_off_mode({"CUDAWATCH_OFF_MODE": "bogus"})
    env = _env(CUDAWATCH_OFF_MODE="bogus",
               CUDAWATCH_REPLAY=str(REPO / "tests" / "data" / "cupti" / "records.jsonl.gz"))
    p = subprocess.run([sys.executable, "-m", "cudawatch", "collect", "--job", "t", "--out", str(tmp_path), "--",
                        sys.executable, "-c", "print('program ran')"], capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 0 and "program ran" in p.stdout
    assert "collector off" in p.stderr and "CUDAWATCH_OFF_MODE='bogus'" in p.stderr


def test_doctor_reports_the_detach_drain_and_whether_the_fence_can_run(monkeypatch):
    from collector.cuda_fence import SYMBOLS
    from collector.doctor import check_detach_drain

    class Driver:  # a stand-in libcuda: attributes are the entry points it exports
        pass

    full, old = Driver(), Driver()
    for name in SYMBOLS:
        setattr(full, name, object())
        if name != "cuDevicePrimaryCtxRelease_v2":
            setattr(old, name, object())
    monkeypatch.delenv("CUDAWATCH_DETACH_DRAIN", raising=False)
    monkeypatch.delenv("CUDAWATCH_DETACH_DRAIN_MS", raising=False)
    c = check_detach_drain(full)
    assert (c.status, c.detail) == ("ok", "fence on every active context's legacy stream, at most 100 ms, adaptive wait as its floor")
    c = check_detach_drain(old)
    assert c.status == "warn" and "lacks cuDevicePrimaryCtxRelease_v2" in c.detail and "adaptive wait" in c.detail
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN", "adaptive")
    assert check_detach_drain(old).detail == "adaptive wait, at most 100 ms (the fence is off)"
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN_MS", "0")
    assert check_detach_drain(old).detail.startswith("off")
    monkeypatch.setenv("CUDAWATCH_DETACH_DRAIN", "sometimes")
    assert check_detach_drain(full).status == "fail"
