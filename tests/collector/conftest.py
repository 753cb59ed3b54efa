"""Shared fixtures: real CUPTI records and shards recorded on an NVIDIA H200 (tests/data/cupti)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "cupti"
RECORDS = DATA / "records.jsonl.gz"
#: 1500 valid + 1500 timestamp-less kernel records from the H200 CNN loop traced with 4 MiB x 4 device
#: buffers and forced flushes every second (benchmarks/cupti_diag.py zerots --config ours_forced, 2026-12-03)
ZERO_TS_RECORDS = DATA / "records_zero_ts.jsonl.gz"
SHARDS = DATA / "shards"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def records():
    from collector.replay import load_records

    return load_records(RECORDS)
