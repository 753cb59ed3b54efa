"""benchmarks/replay_soak.py runs the whole collector session on replayed records and reads its RSS."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq

from ..collector.conftest import REPO


def test_every_replayed_kernel_reaches_the_shards_and_the_rss_is_sampled(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    out, js = tmp_path / "shards", tmp_path / "soak.json"
    p = subprocess.run([sys.executable, "benchmarks/replay_soak.py", "--seconds", "4", "--sample-s", "1",
                        "--out", str(out), "--json", str(js)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads(js.read_text())
    assert res["kernels"] > 0 and res["records"] == res["kernels"] + res["copies"]
    kernel_shards = [out / s for s in res["shards"] if s.startswith("kernels")]
    assert kernel_shards and sum(sum(pq.read_table(s, columns=["launches"]).column(0).to_pylist())
                                 for s in kernel_shards) == res["kernels"]
    assert len(res["rss"]) >= 4 and all(mib > 0 for _, mib in res["rss"]) and res["rss_after_stop_mib"] > 0
    assert res["rss_growth_after_2min_mib"] is None  # a 4-s run has no samples after 2 minutes
