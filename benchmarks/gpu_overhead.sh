#!/bin/bash
# The overhead table's reps outlast one 10-minute device call, so they run in the background:
#   OV_ARGS="--reps 15 --modes none,cudawatch --workloads launch --seconds 30 --warmup 3" \
#       bash benchmarks/gpu_overhead.sh start      # starts benchmarks/overhead.py run in its own session
#   bash benchmarks/gpu_overhead.sh wait [S]       # waits up to S seconds (default 540), copies results to $OUT
# Results: $OUT/overhead.json (when done) or $OUT/overhead.json.partial (finished workers so far), $OUT/overhead.log.
set -u
O=${OUT:-/tmp/out}
D=/tmp/ov
export PYTHONUNBUFFERED=1
start() {
    rm -rf $D && mkdir -p $D $O
    # shellcheck disable=SC2086
    setsid python3 benchmarks/overhead.py run ${OV_ARGS:?set OV_ARGS} --json $D/overhead.json > $D/overhead.log 2>&1 &
    echo $! > $D/pid
}
wait_() {
    local until=$((SECONDS + ${1:-540}))
    while kill -0 "$(cat $D/pid)" 2>/dev/null && [ $SECONDS -lt $until ]; do sleep 5; done
    mkdir -p $O && cp $D/overhead.* $O/ 2>/dev/null
    kill -0 "$(cat $D/pid)" 2>/dev/null && echo "still running" || echo "finished"
    tail -5 $D/overhead.log
}
case "${1:-}" in
    start) start ;;
    wait) wait_ "${2:-540}" ;;
    *) echo "usage: $0 start|wait [seconds]" >&2; exit 2 ;;
esac
