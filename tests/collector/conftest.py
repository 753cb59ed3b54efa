"""Shared fixtures: real CUPTI records and shards recorded on an NVIDIA H200 (tests/data/cupti)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "cupti"
RECORDS = DATA / "records.jsonl.gz"
SHARDS = DATA / "shards"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def records():
    from collector.replay import load_records

    return load_records(RECORDS)
