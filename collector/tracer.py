"""CUPTI Activity API tracer (cupti-python >= 13.4): the only module that calls CUPTI's activity API.

Kinds: CONCURRENT_KERNEL (never KERNEL, which serializes kernels), MEMCPY, MEMSET and OVERHEAD;
RUNTIME/DRIVER API records stay off (they cost about 4x on launch-bound work, see
docs/benchmarks.md). The buffer-completed callback reads each record's fields with one ``attrgetter`` call
(a flat tuple) and hands the rows, ``CHUNK`` at a time, to ``collector.aggregate.Aggregator``, which
counts records without timestamps by reason. Memory is bounded by the host buffer size we hand CUPTI plus CUPTI's
device buffer size x pool limit (``CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`` / ``_POOL_LIMIT``);
records that do not fit are dropped by CUPTI and counted with ``cuptiActivityGetNumDroppedRecords``.

Flushing: while tracing, ``flush()`` is *unforced* (``cuptiActivityFlushAll(0)``: completed
buffers only). A forced flush while kernels are in flight strands the device buffer that holds
their timestamps (measured on the H200, docs/collector.md): with a pool limit of 4 every record
lost its timestamps after ~20 s of 1 s forced flushes; with CUPTI's defaults (3.2 MB x 250) GPU
memory grew ~1 MB/s until the pool would run out. Forced flushes therefore happen only in
``pause()``/``detach()``, after the kinds are disabled and right before ``cuptiFinalize``, which
releases every device buffer. Between the disable and the forced flush the detach waits for kernels
still queued on the GPU (``collector.drain.DetachDrain``: a fence on the legacy stream with an
adaptive floor, at most 100 ms), so their
records are not returned without timestamps. Where ``cuptiFinalize`` runs (the collector's thread,
or an application thread's API exit with ``CUDAWATCH_FINALIZE=callback``) is
``collector.finalize.DetachFinalizer``'s business.
"""

from __future__ import annotations

import ctypes
import functools
import gzip
import json
import threading
import time
from itertools import islice
from operator import attrgetter

from cupti import cupti  # noqa: F401  (ImportError tells the caller CUPTI is missing)

from collector.aggregate import COPY_KINDS, MEMORY_KINDS, Aggregator
from collector.budget import BufferBudget, trim_heap
from collector.drain import DetachDrain
from collector.finalize import DetachFinalizer

AK = cupti.ActivityKind
TRACED_KINDS = (AK.CONCURRENT_KERNEL, AK.MEMCPY, AK.MEMSET, AK.OVERHEAD)
#: OVERHEAD kinds that CUPTI spends in the application's path because we trace. Buffer flush and
#: buffer request time is our own callback (measured directly), and lazy function/module loading or
#: JIT compilation is CUDA's own work that happens with or without a collector.
_OV = cupti.ActivityOverheadKind
_IN_PATH_OVERHEAD = frozenset(int(k) for k in (_OV.CUPTI_INSTRUMENTATION, _OV.CUPTI_RESOURCE, _OV.COMMAND_BUFFER_FULL))
#: Records turned into rows and handed to the aggregator at a time (the record dump, too, is written
#: per chunk). Reading a record's fields makes Python objects (its name string, its timestamps): ~480 B
#: a kernel record, so the rows of a whole 8-MiB buffer (~35 k records; the host-buffer size until
#: 2026-12-07) held 16 MiB at once, those of 4,096 hold 2 MiB (``benchmarks/callback_peak.py``, CPU,
#: stand-in records). A default 1-MiB buffer holds ~4.9 k kernel records (up to ~13 k small copy
#: records), so chunks matter mostly for larger ``CUDAWATCH_HOST_BUFFER_KIB``.
CHUNK = 4096
#: One C call reads every field a kernel row needs (11 separate attribute reads cost ~0.5 us more).
_KERNEL_FIELDS = attrgetter("start", "end", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                            "registers_per_thread", "static_shared_memory", "dynamic_shared_memory", "device_id")


def cupti_version() -> str:
    """Version of the cupti-python binding and, when known, of the loaded libcupti."""
    from importlib import metadata

    parts = []
    for dist in ("cupti-python", "nvidia-cuda-cupti"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return "; ".join(parts) or "unknown"


def _busy(method):
    """Hold the tracer's operation lock while ``method`` runs CUPTI or driver calls: ``Session.stop``
    takes it for its final detach, so it never detaches beside a call the collector's thread is in."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.op_lock:
            return method(self, *args, **kwargs)
    return run


class CuptiTracer:
    """Registers buffer callbacks, enables/disables the traced kinds, flushes and detaches.

    Args:
        agg: where records go.
        budget: buffer sizes.
        dump_path: optional ``.jsonl.gz`` file that receives the first ``dump_max`` record tuples
            as recorded (used to keep real records under tests/data/cupti).
        drain: the wait before a detach's forced flush (default reads ``CUDAWATCH_DETACH_DRAIN_MS``).
        finalizer: where a detach's ``cuptiFinalize`` runs (default reads ``CUDAWATCH_FINALIZE``).
    """

    def __init__(self, agg: Aggregator, budget: BufferBudget | None = None, *, dump_path: str | None = None, dump_max: int = 4000,
                 drain: DetachDrain | None = None, finalizer: DetachFinalizer | None = None) -> None:
        self.agg = agg
        self.budget = budget or BufferBudget()
        self.drain = drain or DetachDrain()
        self.finalizer = finalizer or DetachFinalizer()
        self.kernels = 0
        self.copies = 0
        self.overheads = 0
        self.overhead_ns = 0
        self.callback_s = 0.0
        self.buffers_requested = 0
        self.buffers_completed = 0
        self.buffers_outstanding_max = 0  # most host buffers CUPTI held at once (the budget assumes HOST_BUFFERS_HELD)
        self.attached = False
        self.enabled = False
        self.detach_errors = 0  # failures a detach survived (finalize, fence), counted in health
        self.trims = 0  # detaches after which malloc_trim returned memory to the OS
        # held by calls that reach CUPTI or the driver (``_busy``); re-entrant, so its owner's own
        # non-blocking acquire succeeds: Session.stop is never reached from inside a tracer call
        self.op_lock = threading.RLock()
        self._lock = threading.Lock()
        self._dump = gzip.open(dump_path, "wt") if dump_path else None
        self._dump_left = dump_max

    @property
    def finalizes(self) -> int:
        """``cuptiFinalize`` calls that returned (each keeps ~FINALIZE_KEEPS_GPU_MIB of GPU memory): the
        finalizer's count, so one that returned in an API callback after ``detach`` stopped waiting for
        it (and raised) is counted too, and one that raised is not."""
        return self.finalizer.completed

    # ---- CUPTI callbacks -----------------------------------------------------------------
    def _requested(self):
        self.buffers_requested += 1
        self.buffers_outstanding_max = max(self.buffers_outstanding_max, self.buffers_requested - self.buffers_completed)
        return self.budget.host_buffer, 0

    def _completed(self, activities) -> None:
        # CPU time of CUPTI's thread, not wall time: under a launch-bound program the callback waits
        # for the GIL, and wall time then read 6-10 us per record instead of 1.4 us (H200 runs)
        t0 = time.thread_time()
        now = time.time()  # delivery time: one window gets the whole buffer's delivery counts
        records = iter(activities)
        while chunk := list(islice(records, CHUNK)):  # the rows of one chunk at a time (CHUNK's comment)
            self._fold(chunk, now)
        self.buffers_completed += 1
        self.callback_s += time.thread_time() - t0

    def _fold(self, chunk: list, now: float) -> None:
        """Turn one chunk of records into rows and hand them to the aggregator (and the record dump)."""
        ck, mc, ms, oh = AK.CONCURRENT_KERNEL, AK.MEMCPY, AK.MEMSET, AK.OVERHEAD
        ks, cs = [], []
        ck_append, cs_append, kf, agg = ks.append, cs.append, _KERNEL_FIELDS, self.agg
        for a in chunk:
            k = a.kind
            if k == ck:
                f = kf(a)
                ck_append((*f[:10], f[10] + f[11], f[12]))
            elif k == mc:
                cs_append((a.start, a.end, COPY_KINDS.get(a.copy_kind, str(a.copy_kind)), MEMORY_KINDS.get(a.src_kind, "unknown"),
                           MEMORY_KINDS.get(a.dst_kind, "unknown"), a.bytes, a.device_id))
            elif k == ms:
                cs_append((a.start, a.end, "memset", None, MEMORY_KINDS.get(a.memory_kind, "unknown"), a.bytes, a.device_id))
            elif k == oh:
                agg.add_overhead(a.start, a.end)
                self.overheads += 1
                if a.overhead_kind in _IN_PATH_OVERHEAD:
                    self.overhead_ns += max(a.end - a.start, 0)
        if ks:
            agg.add_kernel_rows(ks, now)
        if cs:
            agg.add_copies(cs, now)
        self.kernels += len(ks)
        self.copies += len(cs)
        if self._dump is not None and self._dump_left > 0:
            self._write_dump(ks, cs)

    def _write_dump(self, ks, cs) -> None:
        for kind, rows in (("kernel", ks), ("copy", cs)):
            for r in rows[: self._dump_left]:
                flat = list(r)
                self._dump.write(json.dumps({"kind": kind, "rec": flat}) + "\n")
                self._dump_left -= 1
        if self._dump_left <= 0:
            self._dump.close()
            self._dump = None

    # ---- control -------------------------------------------------------------------------
    @_busy
    def attach(self) -> None:
        """Register callbacks, bound the buffers and enable the traced kinds (attaches CUPTI)."""
        with self._lock:
            if self.attached:
                return
            cupti.activity_register_callbacks(self._requested, self._completed)
            for attr, value in ((cupti.ActivityAttribute.ATTR_DEVICE_BUFFER_SIZE, self.budget.device_buffer),
                                (cupti.ActivityAttribute.ATTR_DEVICE_BUFFER_POOL_LIMIT, self.budget.device_pool_limit)):
                # cuptiActivitySetAttribute(attr, size_t *valueSize, void *value): both are pointers
                v, size = ctypes.c_size_t(value), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
                cupti.activity_set_attribute(attr, ctypes.addressof(size), ctypes.addressof(v))
            self.clock_offset_ns = time.time_ns() - cupti.get_timestamp()
            self.attached = True
        self.enable()

    @_busy
    def enable(self) -> None:
        with self._lock:
            if self.enabled:
                return
            for kind in TRACED_KINDS:
                cupti.activity_enable(kind)
            self.enabled = True

    @_busy
    def disable(self) -> None:
        with self._lock:
            if not self.enabled:
                return
            for kind in TRACED_KINDS:
                cupti.activity_disable(kind)
            self.enabled = False

    @_busy
    def flush(self, force: bool = False) -> None:
        """Deliver completed buffers to the callback now; ``force`` also delivers partly filled ones
        (records of kernels still in flight then have no timestamps: use only right before detaching)."""
        if self.attached:
            cupti.activity_flush_all(1 if force else 0)

    @_busy
    def dropped(self) -> int:
        """Records CUPTI dropped for lack of buffer space since the last call (raises cuptiError)."""
        if not self.attached:
            return 0
        v = ctypes.c_size_t(0)
        cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(v))
        return int(v.value)

    def pause(self) -> None:
        """Stop tracing without leaving a stranded device buffer: disable the kinds (no new records),
        deliver what completed, force out the rest and ``cuptiFinalize`` (detach)."""
        self.detach()

    @_busy
    def detach(self, *, final: bool = False, fence: bool = True) -> None:
        """Disable, flush unforced, wait for queued kernels (``self.drain``), flush forced and
        ``cuptiFinalize`` (``self.finalizer``: here, or at an application thread's API exit): CUPTI
        leaves the process and its launch-path cost and device buffers with it. Kernels still running
        at the forced flush arrive without timestamps and are counted as invalid; how many did steers
        the next wait."""
        if not self.attached:
            return
        zero0, wait, flushed, finalized = self.agg.invalid_zero_ts, 0.0, False, False
        try:
            self.disable()
            cupti.activity_flush_all(0)
            wait = self.drain.wait_s()  # what an interrupted wait is noted as
            wait = self.drain.wait(final=final, fence=fence)  # the adaptive wait, or until the queued work is done
            cupti.activity_flush_all(1)
            flushed = True
        finally:
            try:
                with self._lock:  # the API-exit callback never takes this lock: waiting under it is safe
                    try:
                        self.finalizer.finalize()
                        finalized = True
                    finally:
                        # failures it survived (or that an interrupt masks) count in this window's health
                        for what in [f"finalize: {w}" for w in self.finalizer.take_unraised()] + self.drain.take_errors():
                            self.detach_errors += 1  # a failed finalize step, or a fence dropped for the adaptive wait
                            self.agg.note_health(time.time(), error=what)
                        # even when it raised: a callback may still finalize later, and an attach must then
                        # register the buffer callbacks again rather than enable kinds on a detached CUPTI
                        self.attached = False
                        self.enabled = False
            finally:  # also when the finalize raised: every detach is noted once, and the heap trimmed
                # read after cuptiFinalize: every record of this attach has been delivered by then
                self.drain.note(self.agg.invalid_zero_ts - zero0, wait, failed=not (flushed and finalized))
                self.trims += trim_heap()
        if final and self._dump is not None:
            self._dump.close()
            self._dump = None


def other_subscriber() -> str | None:
    """Name why another CUPTI client seems active (None when CUPTI is free).

    CUPTI allows one subscriber per process: we subscribe with a no-op callback and unsubscribe at
    once; ``ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`` means someone else (Nsight, a profiler) holds it.
    """
    import os

    inj = os.environ.get("CUDA_INJECTION64_PATH")
    if inj:
        return f"a CUDA injection tool is loaded (CUDA_INJECTION64_PATH={inj}, e.g. Nsight Systems/Compute)"
    try:
        handle = cupti.subscribe(lambda *a: None, None)
    except cupti.cuptiError as exc:
        if getattr(exc, "status", None) == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            return "another CUPTI subscriber is active (torch.profiler, Nsight or another tracer)"
        return f"CUPTI refused a subscriber ({exc})"
    cupti.unsubscribe(handle)
    return None
