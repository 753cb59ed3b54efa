"""The benchmark scripts import their siblings by bare name (``import gpu_workloads``), as a script
run from ``benchmarks/`` finds them; the tests put that folder on the path once, here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
