#!/bin/bash
# Soak of both training loops at once, each under `cudawatch collect` with default settings, on a GPU.
# Run from the repo root. A soak outlasts one 10-minute device call, so it runs in two:
#   SOAK_S=930 bash benchmarks/gpu_soak.sh start    # starts both loops in their own session, returns
#   bash benchmarks/gpu_soak.sh finish              # waits for them, analyzes, packs $OUT/soak.tgz
# `bash benchmarks/gpu_soak.sh run` does both in one go (short soaks). SOAK_DIR (default /tmp/sk) is where the soak
# writes; set it alike for `start` and `finish`.
set -u
O=${OUT:-/tmp/out}
D=${SOAK_DIR:-/tmp/sk}  # SOAK_DIR inside a gpu_queue.sh result folder: every `wait` brings the soak's files so far
S=${SOAK_S:-930}
export PYTHONUNBUFFERED=1
start() {
    rm -rf $D && mkdir -p $D $O
    for w in lm launch; do  # kernels per step, counted once with torch.profiler (no collector)
        python3 benchmarks/soak.py count --workload $w --steps 30 --json $D/kps_$w.json || exit 1
    done
    setsid bash -c "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -l 15 > $D/gpumem.csv 2>&1" &
    echo $! > $D/smi.pid
    for w in lm launch; do
        CUDAWATCH_DUTY_LOG=$D/duty_$w.json setsid bash -c "timeout $((S + 120)) python3 -m cudawatch collect --job soak-$w \
            --out $D/shards -- python3 benchmarks/soak.py train --workload $w --seconds $S --json $D/$w.json > $D/$w.log 2>&1; \
            echo \$? > $D/$w.rc" &   # the exit status of each collected program (a crash must show)
        echo $! > $D/$w.pid
    done
    sleep 45
    tail -n 2 $D/lm.log $D/launch.log; ls $D
}
finish() {
    for w in lm launch; do
        while kill -0 "$(cat $D/$w.pid)" 2>/dev/null; do sleep 5; done
    done
    pkill -P "$(cat $D/smi.pid)" 2>/dev/null; kill "$(cat $D/smi.pid)" 2>/dev/null
    tail -n 3 $D/lm.log $D/launch.log
    for w in lm launch; do echo "$w exit status: $(cat $D/$w.rc 2>/dev/null || echo unknown)"; done
    for w in lm launch; do
        python3 benchmarks/soak.py analyze --shards $D/shards --train $D/$w.json --kps $D/kps_$w.json --job soak-$w --json $D/an_$w.json 2>&1 | tail -14
        python3 benchmarks/soak.py phases --train $D/$w.json --duty-log $D/duty_$w.json --kps $D/kps_$w.json --json $D/ph_$w.json 2>&1
    done
    python3 benchmarks/soak.py gpumem --gpumem $D/gpumem.csv --train $D/lm.json $D/launch.json 2>&1
    mkdir -p $O && tar czf "$O/soak.tgz" -C "$(dirname "$D")" "$(basename "$D")"
}
case "${1:-run}" in
    start) start ;;
    finish) finish ;;
    run) start; finish ;;
    *) echo "usage: $0 start|finish|run" >&2; exit 2 ;;
esac
