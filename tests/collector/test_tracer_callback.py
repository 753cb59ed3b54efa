"""The tracer's buffer callback (``CuptiTracer._completed``) in chunks: a buffer of mixed records handed
over ``CHUNK`` records at a time aggregates exactly what one pass does, with the stand-in ``cupti``."""

from .stand_in_cupti import _run_stand_in

BODY = """
import gzip
AK = cupti.ActivityKind
T0 = 1_900_000_000 * 10**9  # ns, mid-window
def kern(i, ok=True):
    s = T0 + i * 1_000 if ok else 0
    return types.SimpleNamespace(kind=AK.CONCURRENT_KERNEL, start=s, end=s + 500 + i if ok else 0, name=f"k{i % 3}",
        grid_x=1 + i % 2, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1, registers_per_thread=8,
        static_shared_memory=0, dynamic_shared_memory=i % 4, device_id=0)
def copy(i):
    return types.SimpleNamespace(kind=AK.MEMCPY, start=T0 + i * 1_000, end=T0 + i * 1_000 + 300, copy_kind=1 + i % 2,
        src_kind=1, dst_kind=3, bytes=4096 * (1 + i % 3), device_id=0)
def mset(i):
    return types.SimpleNamespace(kind=AK.MEMSET, start=T0 + i * 1_000, end=T0 + i * 1_000 + 100, memory_kind=3,
        bytes=512, device_id=0)
def ovh(i):
    return types.SimpleNamespace(kind=AK.OVERHEAD, start=T0 + i * 1_000, end=T0 + i * 1_000 + 50, overhead_kind=i % 4)
make = (kern, copy, kern, mset, kern, ovh, kern)
buf = [make[i % len(make)](i) for i in range(60)] + [kern(60, ok=False)]
tracer_mod.time = types.SimpleNamespace(time=lambda: T0 / 1e9 + 1, thread_time=time.thread_time, sleep=time.sleep)
out = []
for chunk, source in ((1000, list), (7, iter)):  # one pass; chunks of 7 from an iterator
    tracer_mod.CHUNK = chunk
    agg = Aggregator(window_s=60)
    dump = f"{TMP}/dump_{chunk}.jsonl.gz"
    t = CuptiTracer(agg, dump_path=dump, dump_max=1000)
    t._completed(source(buf))
    t._dump.close()
    windows = [(w.start_s, sorted(repr(kv) for kv in w.kernels.items()), sorted(repr(kv) for kv in w.copies.items()),
                w.records, w.overhead_ns, w.delivered, w.valid, w.invalid_zero_ts) for w in agg.take_all()]
    dumped = sorted(gzip.open(dump, "rt").read().splitlines())
    out.append([t.kernels, t.copies, t.overheads, t.overhead_ns, t.buffers_completed, windows, dumped])
print(json.dumps(out))
"""


def test_a_buffer_in_chunks_aggregates_what_one_pass_does(tmp_path):
    one, chunked = _run_stand_in(tmp_path, f"TMP = {str(tmp_path)!r}\n" + BODY)
    assert one == chunked
    kernels, copies, overheads, overhead_ns, buffers, windows, dumped = chunked
    assert (kernels, copies, overheads, buffers) == (35, 18, 8, 1)  # 34 timed kernels + 1 without timestamps
    assert overhead_ns == 6 * 50  # 6 of the 8 OVERHEAD records are of an in-path kind (0-2 in the stand-in)
    assert [w[-1] for w in windows if w[-1]] == [1]  # the untimed kernel, counted once, in the delivery window
    assert len(dumped) == kernels + copies


def test_the_tracer_counts_the_most_host_buffers_cupti_held_at_once(tmp_path):
    body = """
t = CuptiTracer(Aggregator(window_s=60))
sizes = [t._requested()[0] for _ in range(3)]  # CUPTI asked for three buffers before one came back
t._completed([]); t._completed([])
t._requested()  # one more while one is still out: two out, fewer than the three before
print(json.dumps([sizes, t.buffers_outstanding_max, t.buffers_requested, t.buffers_completed]))
"""
    sizes, most, requested, completed = _run_stand_in(tmp_path, body)
    assert sizes == [1 << 20] * 3 and (most, requested, completed) == (3, 4, 2)
