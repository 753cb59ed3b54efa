"""Crash-safe window spool and hourly shard rotation.

Each closed window is written at once to a small Parquet file in ``ROOT/.spool/<session>/``
(temporary name, fsync, rename), so a crash or SIGKILL loses at most the window still open. Once an
hour is over (and on exit), the hour's spooled windows are combined into one shard per table with
``cudawatch.shards.write_shard`` and the spool files are removed. ``recover`` turns the spool of a
dead process into shards: ``cudawatch collect`` runs it after its child exits, and every collector
runs it at start for sessions whose process is gone.

Readers never look into ``.spool`` (shards live under ``ROOT/<table>/date=.../hour=.../``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collector.aggregate import Window
from collector.rows import ProcessMeta, health_table, kernels_table, memcpy_table
from cudawatch.shards import atomic_file, write_shard

SPOOL_DIR = ".spool"
_TABLES = ("kernels", "memcpy", "health")
_UTC = dt.timezone.utc


def _hour_of(window_start_s: int) -> int:
    return window_start_s // 3600 * 3600


def grace_s(period_s: float) -> float:
    """How long after its end a window is spooled (``Spool.close_and_rotate``): records arrive up to
    one control period late, so two periods + 1 s."""
    return 2 * period_s + 1


class Spool:
    """Spool of one collector session (one process) under ``root``.

    Args:
        root: shard root folder (a local path).
        meta: identity of the process; written to ``session.json`` so ``recover`` can name shards.
        window_s: window length in seconds.
    """

    def __init__(self, root: str | os.PathLike, meta: ProcessMeta, window_s: int) -> None:
        self.root = Path(root)
        self.meta = meta
        self.window_s = window_s
        self.dir = self.root / SPOOL_DIR / f"{meta.host}-{meta.pid}-{meta.run_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "session.json").write_text(json.dumps({"host": meta.host, "pid": meta.pid, "run_id": meta.run_id}))
        self._dir_s = str(self.dir)  # per-window names are built as strings (see add_windows)
        self._seq = 0
        self.shards_total = 0  # shards written (a count, not a list: a collector stays on for weeks)

    def add_windows(self, windows: list[Window]) -> int:
        """Spool closed windows (one file per table per window); returns files written.

        File names are plain strings, never ``pathlib.Path``: on CPython 3.12 every ``Path`` built
        from a new name interns its parts forever (python/cpython#121780, #113993), so one unique
        name per window would grow a collector that stays on for weeks (tests/collector/test_retention.py)."""
        n = 0
        for w in windows:
            for table, build in (("kernels", kernels_table), ("memcpy", memcpy_table), ("health", health_table)):
                data = build([w], self.window_s, self.meta)
                if data.num_rows == 0:
                    continue
                self._seq += 1
                with atomic_file(os.path.join(self._dir_s, f"{table}-{w.start_s}-{self._seq:06d}.parquet")) as fh:
                    pq.write_table(data, fh, compression="zstd")
                n += 1
        return n

    def close_and_rotate(self, agg, now_s: float, period_s: float, *, before_spooling=None) -> list[Window]:
        """A collector session's step, once a control period: spool the windows of ``agg`` that ended
        a grace ago, then combine every hour whose last window is spooled (one shard per table per
        hour). Records arrive up to one control period late (flushed at the end of an on-phase), so
        the grace is two periods + 1 s, and an hour is combined only a grace after it ends (combined
        at its end, its last window would become a second shard). ``before_spooling(windows)`` runs
        first when there are windows to spool. Returns them."""
        grace = grace_s(period_s)
        closed = agg.take_closed(now_s, grace_s=grace)
        if closed:
            if before_spooling is not None:
                before_spooling(closed)
            self.add_windows(closed)
        self.rotate(now_s - grace)
        return closed

    def rotate(self, now_s: float | None = None, *, final: bool = False) -> list[Path]:
        """Write shards for every spooled hour that is over (all hours when ``final``)."""
        current = None if final else _hour_of(int(now_s))
        written = combine(self.root, self.dir, self.meta.host, self.meta.pid, before_hour=current)
        self.shards_total += len(written)
        return written

    def close(self) -> None:
        """Remove the session's spool folder once everything is written."""
        if not any(self.dir.glob("*.parquet")):
            shutil.rmtree(self.dir, ignore_errors=True)


def combine(root: Path, spool_dir: Path, host: str, pid: int, *, before_hour: int | None = None) -> list[Path]:
    """Combine spooled window files of each finished hour into shards; delete what was combined."""
    by_hour: dict[tuple[str, int], list[Path]] = {}
    for f in sorted(spool_dir.glob("*.parquet")):
        if f.name.startswith(".tmp-"):
            continue
        try:
            table, start, _ = f.stem.rsplit("-", 2)
            hour = _hour_of(int(start))
        except ValueError:
            continue
        if table not in _TABLES or (before_hour is not None and hour >= before_hour):
            continue
        by_hour.setdefault((table, hour), []).append(f)
    written = []
    for (table, hour), files in sorted(by_hour.items()):
        parts, read = [], []
        for f in files:
            try:
                # one thread: inside the traced program Arrow's CPU pool would start a thread per core
                # and keep their memory (16 threads: +60 MiB of RSS at the first hour, +25 without)
                parts.append(pq.read_table(f, use_threads=False, pre_buffer=False))
                read.append(f)
            except Exception as exc:  # a torn file cannot exist (atomic rename); keep it, say so, go on
                bad = f.with_name(f.name + ".unreadable")
                f.rename(bad)
                print(f"cudawatch: spool file kept as {bad}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if parts:
            data = pa.concat_tables(parts, promote_options="default")
            written.append(write_shard(root, table, data, dt.datetime.fromtimestamp(hour, _UTC), host=host, pid=pid))
        for f in read:
            f.unlink(missing_ok=True)
    return written


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(root: str | os.PathLike, *, pids: set[int] | None = None) -> list[Path]:
    """Turn spools left by dead processes into shards.

    Args:
        root: shard root.
        pids: recover only these processes' spools (``cudawatch collect`` passes its child's pid);
            when None, every spool whose process is no longer alive on this host.
    """
    base = Path(root) / SPOOL_DIR
    if not base.is_dir():
        return []
    written: list[Path] = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        try:
            info = json.loads((d / "session.json").read_text())
            host, pid = str(info["host"]), int(info["pid"])
        except (OSError, ValueError, KeyError):
            continue
        if pids is not None and pid not in pids:
            continue
        if pids is None and (host != _hostname() or _alive(pid)):
            continue
        written.extend(combine(Path(root), d, host, pid))
        if not any(d.glob("*.parquet")):
            shutil.rmtree(d, ignore_errors=True)
    return written


def _hostname() -> str:
    import socket

    return socket.gethostname()
