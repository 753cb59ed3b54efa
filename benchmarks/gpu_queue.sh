#!/bin/bash
# Runs a queue of GPU measurements one after the other in the background, across device calls,
# and brings everything back as one archive (a device call returns at most 8 files).
#
#   bash benchmarks/gpu_queue.sh start QUEUE_FILE   # one shell command per line; '#' lines skipped
#   bash benchmarks/gpu_queue.sh wait [S]           # wait up to S s (default 540); $OUT/queue.tgz
#   bash benchmarks/gpu_queue.sh stop               # stop the queue (the command running now too)
#
# Each command runs in the repository root with $Q (= /tmp/cudawatch-queue/out) as the folder for its
# results, its output in /tmp/cudawatch-queue/NN.log and no standard input; the queue goes on after a failed command and records every
# exit status in status.txt there. The machine must stay warm between calls: call `wait` again
# within the 30 s a machine stays warm after a call, or the queue is lost with the machine.
# Example queue (docs/benchmarks.md §6 lists what is still to run):
#   CUDAWATCH_DETACH_DRAIN_MS=0 python3 benchmarks/memory.py measure --seconds 90 --duty 0.1 --json $Q/mem_nodrain.json
#   python3 benchmarks/memory.py measure --seconds 90 --duty 0.1 --json $Q/mem_drain.json
set -u
D=/tmp/cudawatch-queue
O=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1

start() {
    [ -f "${1:-}" ] || { echo "usage: $0 start QUEUE_FILE" >&2; exit 2; }
    if [ -f $D/pid ] && kill -0 "$(cat $D/pid)" 2>/dev/null; then
        echo "a queue is still running (pid $(cat $D/pid)): '$0 stop' first" >&2; exit 2
    fi
    rm -rf $D && mkdir -p $D/out && cp "$1" $D/queue.txt
    setsid bash -c '
        n=0
        while IFS= read -r line; do
            case "$line" in ""|"#"*) continue ;; esac
            n=$((n + 1)); f=$(printf "%s/%02d" '"$D"' $n)
            echo "$(date -u +%FT%TZ) start $n: $line" >> '"$D"'/status.txt
            Q='"$D"'/out bash -c "$line" < /dev/null > $f.log 2>&1
            rc=$?
            echo "$(date -u +%FT%TZ) exit $rc of $n" >> '"$D"'/status.txt
        done < '"$D"'/queue.txt
        echo done >> '"$D"'/status.txt' > /dev/null 2>&1 &
    echo $! > $D/pid
}

wait_() {
    local until=$((SECONDS + ${1:-540}))
    while kill -0 "$(cat $D/pid)" 2>/dev/null && [ $SECONDS -lt $until ]; do sleep 5; done
    mkdir -p "$O" && tar czf "$O/queue.tgz" -C $D . 2>/dev/null
    kill -0 "$(cat $D/pid)" 2>/dev/null && echo "still running" || echo "finished"
    tail -4 $D/status.txt
}

case "${1:-}" in
    start) start "${2:-}" ;;
    wait) wait_ "${2:-540}" ;;
    stop) kill -- -"$(cat $D/pid)" 2>/dev/null; echo stopped ;;
    *) echo "usage: $0 start QUEUE_FILE | wait [S] | stop" >&2; exit 2 ;;
esac
