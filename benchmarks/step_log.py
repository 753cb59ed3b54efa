"""The soak's per-step timestamps, kept out of the RSS it measures.

``soak.py train`` records the unix time each step finished (``phases`` needs them). Until
2026-12-06 it kept them in one growing ``array('d')``: 8 bytes a step, in the same process whose
RSS the soak reads. At the launch loop's ~1,100 steps/s that is ~0.5 MiB a minute, and each time
CPython grows the array by its 1/16 it may copy it (§14's 7.8-MiB RSS step at 905 -> 910 s in
docs/benchmarks.md coincides with such a resize). ``StepLog`` writes them to the file in fixed 512-KiB chunks instead, so
the loop's own bookkeeping stays constant.

``python benchmarks/step_log.py rss TRAIN_JSON...`` re-reads soaks recorded before that change:
their RSS series with the old in-memory log subtracted (runs that say ``"step_log": "streamed"``
are reported as recorded) (``array_bytes``, CPython's growth rule,
checked against ``sys.getsizeof`` in tests/benchmarks/test_step_log.py), steps interpolated within
each window from ``steps_per_window``.
"""

from __future__ import annotations

import argparse
import array
import json

import numpy as np

CHUNK = 65_536  # steps per write: 512 KiB


class StepLog:
    """Appends float64 step times to ``path`` through one fixed buffer (never grows, never copies)."""

    def __init__(self, path, chunk: int = CHUNK) -> None:
        self._f = open(path, "wb")
        self._buf = array.array("d", bytes(8 * chunk))
        self._view = memoryview(self._buf)
        self._n = 0
        self.count = 0

    def append(self, t: float) -> None:
        self._buf[self._n] = t
        self._n += 1
        self.count += 1
        if self._n == len(self._buf):
            self._flush()

    def _flush(self) -> None:
        self._f.write(self._view[: self._n])
        self._n = 0

    def close(self) -> None:
        if self._f.closed:
            return
        self._flush()
        self._view.release()
        self._f.close()

    def __enter__(self) -> "StepLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # a loop that raises still leaves the steps it finished on disk


def read_steps(path) -> np.ndarray:
    """The step times a ``StepLog`` (or the old ``array.tofile``) wrote, in order."""
    return np.fromfile(path, dtype=np.float64)


def growth_after_2min(rss) -> tuple[float, float] | None:
    """(growth to the end, largest growth) of an RSS series ``[(t s, MiB), ...]`` from its first
    sample at or after 120 s: the soak's memory measure (``soak.py analyze``); None before that."""
    after = [v for t, v in rss if t >= 120]
    return (after[-1] - after[0], max(after) - after[0]) if after else None


#: The soaks' RSS tail span (s): from past the first detach/attach cycles after the 2-minute mark to
#: the end of a 15-minute soak. ``soak.py train`` takes its first memory census at its start.
TAIL_FROM_S, TAIL_TO_S = 245.0, 905.0


def theil_sen_mib_per_min(points) -> float:
    """Theil-Sen slope (median of pairwise slopes) of ``[(t s, MiB), ...]`` in MiB a minute; NaN
    without two distinct times. A one-off step (the first shard write importing pyarrow: +41-46 MiB
    on the H200) moves it far less than least squares, and not at all near either end of the samples."""
    t, v = (np.asarray(c, dtype=float) for c in zip(*points)) if points else (np.empty(0), np.empty(0))
    i, j = np.triu_indices(len(t), k=1)
    keep = t[j] > t[i]
    return 60.0 * float(np.median((v[j] - v[i])[keep] / (t[j] - t[i])[keep])) if keep.any() else float("nan")


def least_squares_slope(points) -> float:
    """Least-squares slope of ``[(x, y), ...]`` in y per unit of x; NaN with fewer than 3 points or
    without two distinct x."""
    if len(points) < 3:
        return float("nan")
    t, v = (np.asarray(c, dtype=float) for c in zip(*points))
    return float(np.polyfit(t, v, 1)[0]) if np.ptp(t) > 0 else float("nan")


def least_squares_mib_per_min(points) -> float:
    """Least-squares slope of ``[(t s, MiB), ...]`` in MiB a minute (``least_squares_slope``)."""
    return 60.0 * least_squares_slope(points)


def array_bytes(n: int) -> int:
    """Bytes of items an ``array('d')`` holds after ``n`` appends (CPython's ``array_resize``:
    ``new = (newsize >> 4) + (3 if size < 8 else 7) + newsize`` whenever it is full)."""
    allocated = size = 0
    while size < n:
        if size == allocated:
            allocated = ((size + 1) >> 4) + (3 if size < 8 else 7) + size + 1
        # jump to the next resize (or to n): nothing changes in between
        size = min(n, allocated)
    return 8 * allocated


def steps_at(train: dict, t: np.ndarray) -> np.ndarray:
    """Steps finished by ``t`` seconds after ``train['t0']``, linear within each logged window."""
    t0, w = train["t0"], train["window_s"]
    edges_t, edges_n, n = [0.0], [0], 0
    end = max(r[0] for r in train["rss"]) + 5.0  # the last window is cut at the run's end
    for ws, v in sorted((int(k), v) for k, v in train["steps_per_window"].items()):
        n += v
        edges_t.append(max(min(ws + w - t0, end), edges_t[-1]))
        edges_n.append(n)
    return np.interp(t, edges_t, edges_n)


def rss_measures(t: np.ndarray, rss_mib: np.ndarray, lo_s: float = TAIL_FROM_S, hi_s: float = TAIL_TO_S) -> dict:
    """The soaks' memory measures of one RSS series: growth after the first 2 minutes (None without
    samples there) and the least-squares slope between ``lo_s`` and ``hi_s`` in MiB a minute (None
    with fewer than 3 samples there)."""
    m = (t >= lo_s) & (t <= hi_s)
    growth = growth_after_2min(zip(t, rss_mib))
    slope = least_squares_mib_per_min(list(zip(t[m], rss_mib[m])))
    return {"growth_after_2min_mib": float(growth[0]) if growth else None,
            "slope_mib_per_min": None if np.isnan(slope) else slope}


def rss_without_step_log(train: dict, lo_s: float = TAIL_FROM_S, hi_s: float = TAIL_TO_S) -> dict:
    """RSS growth after the first 2 minutes, the least-squares slope between ``lo_s`` and
    ``hi_s``, as recorded and with the old in-memory step log subtracted, and the largest step after
    the first 2 minutes."""
    rss = np.asarray(train["rss"], dtype=float)
    if len(rss) < 3 or rss[-1, 0] <= 120.0:
        raise ValueError(f"{len(rss)} RSS samples up to {rss[-1, 0] if len(rss) else 0:.0f} s: a run needs samples beyond its first 2 minutes")
    t, r = rss[:, 0], rss[:, 1]
    if train.get("step_log") == "streamed":  # recorded since the fix: nothing to subtract
        log = np.zeros_like(r)
    else:
        log = np.array([array_bytes(int(n)) for n in steps_at(train, t)]) / 2**20
    res = {"steps": train["steps"], "step_log_mib_at_end": float(log[-1])}
    for name, y in (("recorded", r), ("without_step_log", r - log)):
        res[name] = rss_measures(t, y, lo_s, hi_s)
    # the largest step between two samples after the first 2 minutes, and whether the old log was
    # resized in it (a resize may copy the array, and the old copy stays resident until a trim)
    k = int(np.searchsorted(t, 120.0))
    k += int(np.argmax(np.diff(r[k:])))
    res["largest_rss_step"] = {"from_s": float(t[k]), "to_s": float(t[k + 1]), "mib": float(r[k + 1] - r[k]),
                               "step_log_resized": bool(log[k + 1] > log[k])}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("rss", help="soaks recorded with the in-memory step log: RSS with it subtracted")
    p.add_argument("train", nargs="+")
    a = ap.parse_args()
    for path in a.train:
        with open(path) as fh:
            print(path, json.dumps(rss_without_step_log(json.load(fh))))


if __name__ == "__main__":
    main()
