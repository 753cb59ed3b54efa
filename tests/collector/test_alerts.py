"""Prometheus alert rules (docker/collector/alerts.yml) checked and unit-tested with promtool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from .conftest import REPO

RULES = REPO / "docker" / "collector" / "alerts.yml"
RULE_TESTS = REPO / "docker" / "collector" / "alerts_test.yml"
PROMTOOL = shutil.which("promtool")

needs_promtool = pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"),
                                    reason="promtool not installed (Debian package 'prometheus'); CI must have it")


@needs_promtool
def test_rules_are_valid():
    assert PROMTOOL, "promtool is required in CI"
    p = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 11 rules found" in p.stdout


@needs_promtool
def test_rules_fire_on_the_expected_series():
    assert PROMTOOL, "promtool is required in CI"
    p = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, cwd=RULES.parent)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_held_buffers_alert_fires_above_what_the_budget_assumes():
    from cudawatch.config import HOST_BUFFERS_HELD

    assert f"cudawatch_collector_cupti_host_buffers_held_max > {HOST_BUFFERS_HELD}\n" in RULES.read_text()


def test_the_kept_gpu_memory_alert_uses_what_a_cycle_was_measured_to_keep():
    from cudawatch.config import FINALIZE_KEEPS_GPU_MIB

    assert f"cudawatch_collector_cupti_finalizes_total * {FINALIZE_KEEPS_GPU_MIB} > 1024\n" in RULES.read_text()


def test_required_alerts_exist_and_use_served_metrics():
    text = RULES.read_text()
    for name in ("LowGPUUtilization", "HighMemoryBandwidth", "CollectorOverheadOverBudget", "GPUThrottled", "ShardsNotArriving"):
        assert f"alert: {name}" in text
    from collector import agent

    served = set(re.findall(r"\"(c(?:uda|udawatch)_[a-z_]+)\"", (REPO / "collector" / "agent.py").read_text()))
    served |= {n + "_total" for n in served}
    used = set(re.findall(r"\b(cuda(?:watch)?_[a-z_]+)\b", text)) - {"cudawatch_agent", "cuda_clocks_event_reasons"}
    assert used <= served | {"cuda_clocks_event_reasons"}, used - served
    assert agent  # the module that serves them imports without NVML
