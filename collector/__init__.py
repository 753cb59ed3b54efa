"""In-process CUDA collector (CUPTI activity tracing) and node agent (NVML/GPM, Prometheus).

Library API (imports nothing heavy until ``start`` is called)::

    import collector
    collector.start(job="train", out="/data/shards")   # or: with collector.collecting(job="train"):
    ...
    collector.stop()

``cudawatch collect -- python train.py`` injects the same collector into an unmodified program.
Must stay light: never imports duckdb, scipy or airflow.
"""

from __future__ import annotations

import contextlib


def start(job: str | None = None, out=None, **options):
    """Start collecting in this process; returns the Session (inactive, with ``.reason``, if it cannot)."""
    from collector import session

    return session.start(job, out, **options)


def stop() -> None:
    """Flush and write the last shards; safe to call twice."""
    from collector import session

    session.stop()


@contextlib.contextmanager
def collecting(job: str | None = None, out=None, **options):
    """Context manager form of ``start``/``stop``."""
    s = start(job, out, **options)
    try:
        yield s
    finally:
        stop()


__all__ = ["start", "stop", "collecting"]
