"""Fault injection on a simulated fleet the detector was not tuned on (32 GPUs, 48 h, seed 11,
the default scenario of six injected regressions): 5 % of the shard files are corrupted in the
ways of issue 11 (impossible device values, a wrong clock in either direction, year 9999,
impossible kernel counts, a second copy of a shard, a copy with total_ns as strings, bytes that
are not Parquet, a malformed partition folder). Every injected regression is still found with its
cause, and nothing is found that the clean fleet does not show (docs/reliability.md)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import simulator
from cudawatch import shards as sh

from .conftest import START, regression_key, run

GPUS, HOURS, SEED, FRACTION = 32, 48, 11, 0.05

#: Injected kind -> root-cause rules that count as its cause (as benchmarks/rootcause.py).
CAUSES = {
    "kernel_slowdown": {"kernel_slower"}, "launch_config_change": {"launch_config_changed"}, "new_kernel": {"new_kernel"},
    "more_launches": {"more_launches"}, "pageable_memcpy": {"pageable_memcpy"},
    "clock_throttle": {"clock_throttle", "straggler_gpu"},
}


def _set(t: pa.Table, name: str, values) -> pa.Table:
    f = t.schema.field(name)
    return t.set_column(t.schema.get_field_index(name), f, pa.array(values, f.type))


def _bad_device(t, rng):
    n = t.num_rows
    return _set(_set(t, "sm_clock_mhz", [1e12] * n), "power_w", [math.nan] * n)


def _few_bad_device(t, rng):
    return _set(t, "temp_c", [math.inf if i % 10 == 0 else v for i, v in enumerate(t.column("temp_c").to_pylist())])


def _clock(year):
    def f(t, rng):
        col = sh.TIME_COLUMN[_table_of(t)]
        return _set(t, col, [dt.datetime(year, 1, 1, tzinfo=dt.timezone.utc)] * t.num_rows)
    f.__name__ = f"clock_{year}"
    return f


def _few_bad_counts(t, rng):
    if "launches" not in t.column_names:
        return _few_bad_device(t, rng) if "temp_c" in t.column_names else t
    launches = t.column("launches").to_pylist()
    for i in rng.sample(range(t.num_rows), min(3, t.num_rows)):
        launches[i] = 10**18
    return _set(t, "launches", launches)


def _table_of(t: pa.Table) -> str:
    return "device" if "ts" in t.column_names else ("kernels" if "kernel_id" in t.column_names else
                                                     ("memcpy" if "copy_kind" in t.column_names else "health"))


REWRITES = [_bad_device, _few_bad_device, _clock(2030), _clock(1970), _clock(9999), _few_bad_counts]
EXTRA = ["copy", "strings", "garbage", "malformed"]


def corrupt(root, rng: random.Random) -> dict[str, int]:
    """Corrupt FRACTION of the shard files; returns how many of each fault were applied."""
    files = sh.list_shards(root)
    chosen = rng.sample(files, round(FRACTION * len(files)))
    applied: dict[str, int] = {}
    for i, path in enumerate(chosen):
        kind = i % (len(REWRITES) + len(EXTRA))
        if kind < len(REWRITES):
            t = pq.read_table(path)
            fault = REWRITES[kind]
            if fault in (_bad_device, _few_bad_device) and "sm_clock_mhz" not in t.column_names:
                fault = _few_bad_counts
            pq.write_table(fault(t, rng), path)
            name = f"rewrite:{fault.__name__}"
        else:
            name = EXTRA[kind - len(REWRITES)]
            if name == "copy":
                shutil.copyfile(path, path.with_name("copy-" + path.name))
            elif name == "strings":  # a numeric column as strings that cast (total_ns, else the first int64)
                t = pq.read_table(path)
                col = "total_ns" if "total_ns" in t.column_names else next(
                    f.name for f in t.schema if pa.types.is_int64(f.type))
                t = t.set_column(t.schema.get_field_index(col), col, pc.cast(t.column(col), pa.string()))
                pq.write_table(t, path.with_name("strings-" + path.name))
            elif name == "garbage":
                path.with_name("garbage-" + path.name).write_bytes(b"PAR1 this is not parquet" * 10)
            else:
                junk = path.parents[2] / "date=garbage" / "hour=xx"
                junk.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, junk / path.name)
        applied[name] = applied.get(name, 0) + 1
    return applied


def explains(reg, truth: dict) -> bool:
    onset = dt.datetime.fromisoformat(truth["onset"])
    if abs((reg.onset - onset).total_seconds()) > 2 * 3600:
        return False
    if truth.get("gpu_uuid"):
        return reg.gpu_uuid == truth["gpu_uuid"]
    return reg.job == truth["job"] and (truth.get("kernel_id") is None or reg.kernel_id in (truth["kernel_id"], None))


@pytest.fixture(scope="module")
def fleets(tmp_path_factory):
    base = tmp_path_factory.mktemp("fi")
    clean_root, bad_root = base / "clean", base / "faulty"
    simulator.simulate_fleet(clean_root, gpus=GPUS, hours=HOURS, seed=SEED, start=START)
    shutil.copytree(clean_root, bad_root)
    applied = corrupt(bad_root, random.Random(SEED))
    now, last = START + dt.timedelta(hours=HOURS + 1), START + dt.timedelta(hours=HOURS - 1)
    return (run(clean_root, base / "clean.duckdb", now, last), run(bad_root, base / "faulty.duckdb", now, last),
            json.loads((clean_root / "ground_truth.json").read_text()), applied)


def test_every_injected_regression_is_found_with_its_cause(fleets):
    clean, faulty, truth, applied = fleets
    assert sum(applied.values()) == round(FRACTION * truth["shards"])
    report = {}
    for t in truth["regressions"]:
        found = [r for r in faulty.regressions if explains(r, t)]
        with_cause = [r for r in found if r.causes and r.causes[0].rule in CAUSES[t["kind"]]]
        report[t["kind"]] = (len(found), len(with_cause))
    assert all(n and c for n, c in report.values()), report
    assert len(report) == 6


def test_nothing_else_is_found(fleets):
    clean, faulty, truth, _ = fleets
    assert faulty.causes() == clean.causes()  # the same events, onsets and top causes as the clean fleet
    unexplained = [regression_key(r) for r in faulty.regressions if not any(explains(r, t) for t in truth["regressions"])]
    assert unexplained == [r for r in unexplained if r in clean.keys()]  # noise the clean fleet shows too, if any
    new = faulty.keys() - clean.keys()
    assert all(any(explains(r, t) for t in truth["regressions"]) for r in faulty.regressions if regression_key(r) in new)


def test_every_fault_is_accounted_for(fleets):
    clean, faulty, truth, applied = fleets
    ing = faulty.ingest
    assert ing.warnings and all("malformed partition folder" in w for w in ing.warnings)
    assert len(ing.warnings) == applied.get("malformed", 0)
    reasons = {r.split(":")[0] for r in ing.rejected}
    assert "duplicate" in reasons and "outside_partition_hour" in reasons
    garbage = [p for p, reason in ing.quarantined if "garbage-" in p]
    assert len(garbage) == applied.get("garbage", 0) and all("not a readable Parquet file" in r for p, r in ing.quarantined if "garbage-" in p)
    # rows in = rows loaded + rows not loaded, per table and in total
    assert sum(ing.rows_in.values()) == sum(ing.rows.values()) + sum(ing.rejected.values())
    assert sum(ing.rows.values()) <= sum(clean.ingest.rows.values())
