"""collector.replay: a flush hands out exactly the recorded records whose replay time fell in it."""

from __future__ import annotations

import random

import pytest

from collector import replay
from collector.replay import ReplayTracer, load_records

from .conftest import RECORDS, ZERO_TS_RECORDS


class _Sink:
    def __init__(self):
        self.kernels, self.copies = [], []

    def add_kernels(self, ks, now):
        self.kernels.extend(ks)

    def add_copies(self, cs, now):
        self.copies.extend(cs)


@pytest.mark.parametrize("path", [RECORDS, ZERO_TS_RECORDS], ids=["real", "lossy"])
def test_flushes_at_random_times_deliver_each_loop_once(monkeypatch, path):
    """Flushes at irregular times over three and a half loops of the recording, the replay clock
    driven by hand: every timed record of the covered span arrives once per loop in which its
    time came, and every untimed one with the timed record it was recorded after."""
    clock = {"ns": 10**18}
    monkeypatch.setattr(replay.time, "time_ns", lambda: clock["ns"])
    sink = _Sink()
    tr = ReplayTracer(sink, path, speed=4.0)
    tr.attach()
    horizon = int(3.5 * tr._span)  # replay ns covered
    rng = random.Random(7)
    while int((clock["ns"] - tr._wall0) * tr.speed) < horizon:
        clock["ns"] += rng.randint(1, tr._span // 3) // 4 + 1  # wall ns; replay runs 4x faster
        tr.flush()
    covered = int((clock["ns"] - tr._wall0) * tr.speed)
    untimed: list = []
    kernels, copies = load_records(path, untimed=untimed)

    def times_due(start_ns):  # loops in which a record starting at start_ns falls inside [0, covered)
        rel = start_ns - tr._t0
        return sum(1 for loop in range(covered // tr._span + 1) if rel + loop * tr._span < covered)

    assert len(sink.kernels) == sum(times_due(r[0]) for r in kernels) + sum(times_due(at) for at, k, _ in untimed if k)
    assert len(sink.copies) == sum(times_due(r[0]) for r in copies) + sum(times_due(at) for at, k, _ in untimed if not k)
    timed = [k for k in sink.kernels if k[0] > 0]
    assert timed and all(b[0] >= a[0] for a, b in zip(timed, timed[1:]))  # the replay timeline only moves on
    assert all(k[1] - k[0] in {r[1] - r[0] for r in kernels} for k in timed[:200])  # durations as recorded
    assert (len(sink.kernels) > len(timed)) == bool(untimed)
