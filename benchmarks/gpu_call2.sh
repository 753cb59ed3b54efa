#!/bin/bash
# device call 2 (2026-12-03): soak smoke test + interleaved overhead runs. Run from the repo root.
set -u
O=${OUT:-/tmp/out}
mkdir -p $O /tmp/sm
export PYTHONUNBUFFERED=1
timeout 60 python3 benchmarks/soak.py count --workload lm --steps 30 --json /tmp/sm/kps_lm.json 2>&1 | tail -2
timeout 40 python3 benchmarks/soak.py count --workload launch --steps 30 --json /tmp/sm/kps_launch.json 2>&1 | tail -2
export CUDAWATCH_WINDOW_S=10
timeout 80 python3 -m cudawatch collect --job soak-lm --out /tmp/sm/shards -- python3 benchmarks/soak.py train --workload lm --seconds 30 --json /tmp/sm/lm.json 2>&1 | tail -3 &
timeout 80 python3 -m cudawatch collect --job soak-launch --out /tmp/sm/shards -- python3 benchmarks/soak.py train --workload launch --seconds 30 --json /tmp/sm/launch.json 2>&1 | tail -3
wait
unset CUDAWATCH_WINDOW_S
python3 benchmarks/soak.py analyze --shards /tmp/sm/shards --train /tmp/sm/lm.json --kps /tmp/sm/kps_lm.json --job soak-lm --json /tmp/sm/an_lm.json 2>&1 | tail -14
python3 benchmarks/soak.py analyze --shards /tmp/sm/shards --train /tmp/sm/launch.json --kps /tmp/sm/kps_launch.json --job soak-launch --json /tmp/sm/an_launch.json 2>&1 | tail -14
tar czf $O/smoke.tgz -C /tmp sm
timeout 330 python3 benchmarks/overhead.py run --reps 2 --modes none,cudawatch,profiler --seconds launch=10,mixed=6,heavy=6 \
    --warmup launch=2,mixed=10,heavy=6 --json $O/ov_all.json --md $O/ov_all.md 2>&1 | tail -12
timeout 150 python3 benchmarks/overhead.py run --reps 2 --modes none,cudawatch,profiler --workloads launch --seconds 10 --warmup 2 \
    --json $O/ov_launch.json --md $O/ov_launch.md 2>&1 | tail -8
python3 benchmarks/overhead.py summarize $O/ov_all.json $O/ov_launch.json --md $O/ov_pooled.md 2>&1 | tail -6
