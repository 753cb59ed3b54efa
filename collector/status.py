"""The small JSON a collector session keeps for the node agent, which exports it as Prometheus
metrics (``ROOT/.status/<host>-<pid>.json``; collector.agent)."""

from __future__ import annotations

import json
import os

from collector.rows import quality_of


def write_status(s, now: float, window=None) -> None:
    """Write session ``s``'s status at ``now`` (after ``window`` closed, if given) atomically; a
    failure is counted in its errors (``collector_errors_total`` of the next write) and noted in the
    open window's health, retried at the next write. The write at stop comes after the last shards,
    so its failure is only counted."""
    try:
        d = s.out / ".status"
        d.mkdir(parents=True, exist_ok=True)
        alive = max(now - s.meta.alive_from_s, 1e-9) if window is None else s.window_s
        a = s.agg
        status = {"host": s.meta.host, "pid": s.meta.pid, "job": s.job, "run_id": s.meta.run_id,
                  "ts": now, "duty": s.controller.duty if s.adaptive else 1.0,
                  "overhead_pct": 100.0 * (window.cost_s if window else 0.0) / alive,
                  "budget_pct": s.budget_pct, "dropped_records": window.dropped if window else 0,
                  "records": a.records_total, "shards_written": s.spool.shards_total,
                  "running": not s.stopped,
                  # data quality: totals since start (Prometheus counters) and the last closed window
                  "records_delivered_total": a.delivered_total, "records_valid_total": a.valid_total,
                  "records_invalid_total": {"zero_timestamp": a.invalid_zero_ts, "end_before_start": a.invalid_order},
                  "dropped_records_total": s.dropped_total, "collector_errors_total": s.errors + s.tracer.detach_errors,
                  "cupti_host_buffers_held_max": s.tracer.buffers_outstanding_max,  # the buffer budget assumes HOST_BUFFERS_HELD
                  "cupti_finalizes_total": s.tracer.finalizes,  # each keeps ~FINALIZE_KEEPS_GPU_MIB of GPU memory
                  "window_quality": quality_of(window) if window is not None else None}
        tmp = d / f".tmp-{s.meta.host}-{s.meta.pid}.json"
        tmp.write_text(json.dumps(status))
        os.replace(tmp, d / f"{s.meta.host}-{s.meta.pid}.json")
    except OSError as exc:
        s.errors += 1  # counted in collector_errors_total and the window's health; the next write retries
        s.agg.note_health(now, error=f"writing the status file: {type(exc).__name__}: {exc}")
