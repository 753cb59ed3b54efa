#!/bin/bash
# device call 3 (2026-12-03): soak of both training loops at once under `cudawatch collect`, default settings.
set -u
O=${OUT:-/tmp/out}
S=${SOAK_S:-390}
mkdir -p $O /tmp/sk
export PYTHONUNBUFFERED=1
echo '{"kernels_per_step": 297.0, "source": "torch.profiler, 30 steps, device call 2"}' > /tmp/sk/kps_lm.json
echo '{"kernels_per_step": 100.0, "source": "torch.profiler, 30 steps, device call 2"}' > /tmp/sk/kps_launch.json
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -l 15 > /tmp/sk/gpumem.csv 2>&1 &
SMI=$!
timeout $((S + 90)) python3 -m cudawatch collect --job soak-lm --out /tmp/sk/shards -- python3 benchmarks/soak.py train --workload lm --seconds $S --json /tmp/sk/lm.json > /tmp/sk/lm.log 2>&1 &
LM=$!
timeout $((S + 90)) python3 -m cudawatch collect --job soak-launch --out /tmp/sk/shards -- python3 benchmarks/soak.py train --workload launch --seconds $S --json /tmp/sk/launch.json > /tmp/sk/launch.log 2>&1
wait $LM
sleep 2
kill $SMI
tail -3 /tmp/sk/lm.log /tmp/sk/launch.log
python3 benchmarks/soak.py analyze --shards /tmp/sk/shards --train /tmp/sk/lm.json --kps /tmp/sk/kps_lm.json --job soak-lm --json /tmp/sk/an_lm.json 2>&1 | tail -13
python3 benchmarks/soak.py analyze --shards /tmp/sk/shards --train /tmp/sk/launch.json --kps /tmp/sk/kps_launch.json --job soak-launch --json /tmp/sk/an_launch.json 2>&1 | tail -13
tar czf $O/soak.tgz -C /tmp sk
