"""benchmarks/callback_peak.py: the tracer's buffer callback, run as shipped on stand-in records, holds
far less at once when it hands rows over in chunks, and aggregates exactly the same windows."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_chunked_callback_holds_less_and_aggregates_the_same(tmp_path):
    out = tmp_path / "peak.json"
    p = subprocess.run([sys.executable, "benchmarks/callback_peak.py", "--records", "20000", "1000", "--reps", "1",
                        "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    big, small = json.loads(out.read_text())["runs"]
    assert big["same_windows"] and big["whole"]["kernels"] == big["chunked"]["kernels"] == 20000
    assert big["chunk"] < 20000 and big["peak_ratio_chunked_over_whole"] < 0.5  # rows of one chunk, not of the buffer
    assert small["same_windows"] and small["peak_ratio_chunked_over_whole"] == 1.0  # a buffer within one chunk: as before
