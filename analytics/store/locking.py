"""A writer lock beside the DuckDB warehouse file, so one process writes at a time.

DuckDB allows one writing process per database file (https://duckdb.org/docs/connect/concurrency).
Airflow already serialises the writing tasks through the ``cudawatch_duckdb`` pool of size 1; this
lock is the second line of defence for writers outside Airflow (``cudawatch ingest`` run by hand, a
second Airflow deployment, a pool someone resized). It is an advisory ``flock(2)`` on
``<db>.lock``: the kernel releases it when the holder dies, so a crashed task never leaves it stuck.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator


class LockTimeout(TimeoutError):
    """The warehouse stayed locked by another writer for longer than the timeout."""


def lock_path(db: str | os.PathLike) -> Path:
    """The lock file that guards ``db``."""
    return Path(f"{os.fspath(db)}.lock")


@contextlib.contextmanager
def writer_lock(db: str | os.PathLike, *, timeout_s: float = 600.0, poll_s: float = 0.2) -> Iterator[Path]:
    """Hold the exclusive writer lock of ``db`` for the ``with`` block.

    timeout_s: how long to wait for another writer before raising LockTimeout (0: try once).
    poll_s: how often to retry while waiting.
    """
    path = lock_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"warehouse {db} is locked by another writer ({path}); waited {timeout_s:.0f} s") from None
                time.sleep(poll_s)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
