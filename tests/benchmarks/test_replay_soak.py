"""benchmarks/replay_soak.py runs the whole collector session on replayed records and reads its RSS."""

import json
import os
import subprocess
import sys
import tracemalloc

import pyarrow.parquet as pq
import pytest

import replay_soak

from ..collector.conftest import REPO


@pytest.mark.parametrize("settings, cycles", [({}, 1), ({"CUDAWATCH_ADAPTIVE": "0"}, 0)])
def test_every_replayed_kernel_reaches_the_shards_and_the_rss_is_sampled(tmp_path, settings, cycles):
    """The default controller's first on-phase (a fraction of a second of its 30-s period) ends in
    one detach, and a 6-s run stops in the off-phase after it; with duty cycling off it never
    detaches and stops while tracing, so the stop's final detach delivers the rest, counted too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")} | settings
    out, js = tmp_path / "shards", tmp_path / "soak.json"
    trace = ["--census-from", "2", "--trace-python"] if not settings else []  # the heap census on one of the two runs
    p = subprocess.run([sys.executable, "benchmarks/replay_soak.py", "--seconds", "6", "--sample-s", "1",
                        "--out", str(out), "--json", str(js), *trace], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads(js.read_text())  # strict JSON: no NaN for the slopes a short run cannot have
    assert res["settings"] == settings and res["kernels"] > 0 and res["records"] == res["kernels"] + res["copies"]
    kernel_shards = [out / s for s in res["shards"] if s.startswith("kernels")]
    assert kernel_shards and sum(sum(pq.read_table(s, columns=["launches"]).column(0).to_pylist())
                                 for s in kernel_shards) == res["kernels"]
    # sampled before the start and at least once while it ran (how often depends on the machine's load: the
    # start alone took ~2.8 s with tracemalloc on, 2-core VM, the heap census after the 2-s mark up to ~3.8 s)
    times = [t for t, _ in res["rss"]]
    assert times[0] == 0.0 and len(times) >= 2 and min(b - a for a, b in zip(times, times[1:])) >= 0.99  # --sample-s 1
    assert [p[0] for p in res["proc"]] == [t for t, _ in res["rss"]] and all(p[1] >= 2 and p[2] > 0 and p[3] > 0 for p in res["proc"])
    assert res["rss_after_stop_mib"] > 0 and res["rss_growth_after_2min_mib"] is None
    assert res["rss_slope_245_905_mib_per_min"] is None and res["cycles"] == cycles
    if trace:
        heap = res["heap"]
        assert 2 <= heap["from"]["t_s"] < heap["to"]["t_s"] and heap["to"]["python_traced_mib"] > 0
        assert heap["from"]["pyarrow_pool_mib"] >= 0 and isinstance(heap["growth_sites"], list)
        assert isinstance(heap["regions"], list) and all({"region", "rss_kib_diff"} <= set(r) for r in heap["regions"])
        assert heap["growth_sites"]  # the RSS samples alone grow a list between the two snapshots
        assert not any(p.suffix == ".snapshot" for p in out.rglob("*"))  # nothing left in the shard root
    else:
        assert "heap" not in res


def test_growth_sites_name_where_python_memory_grew():
    tracemalloc.start(5)
    try:
        first = tracemalloc.take_snapshot()
        kept = [bytearray(1 << 20) for _ in range(4)]  # 4 MiB from this line
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    top = replay_soak._growth_sites(first, last)[0]
    assert top["size_diff_kib"] >= 4096 and top["count_diff"] >= 4 and len(kept) == 4
    assert top["frames"][0].startswith("test_replay_soak.py:")


def test_the_summary_reads_growth_and_slopes_over_the_soaks_spans():
    """A series with a one-off step at 60 s and then a known rise of 0.5 MiB a minute."""
    rss = [(t, 100.0 + (20.0 if t >= 60 else 0.0) + 0.5 * t / 60) for t in range(0, 935, 5)]
    got = replay_soak.summarize(rss, 930)
    assert got["rss_growth_after_2min_mib"] == pytest.approx(0.5 * (930 - 120) / 60)
    for k in ("rss_slope_245_905_mib_per_min", "rss_slope_540_905_mib_per_min", "rss_theil_sen_second_half_mib_per_min"):
        assert got[k] == pytest.approx(0.5)
    assert (got["rss_start_mib"], got["rss_end_mib"]) == (100.0, rss[-1][1])
