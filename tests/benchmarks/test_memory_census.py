"""benchmarks/memory.py --census: the type census names what grew between two counts."""


import gpu_workloads  # benchmarks/ (tests/benchmarks/conftest.py puts it on the path)

import memory


class _Kept:
    def __init__(self):
        self.payload = {"k": [1, 2]}


def test_census_names_the_type_that_was_kept():
    before = memory.type_census()
    kept = [_Kept() for _ in range(3000)]
    after = memory.type_census()
    grew = dict(memory.census_growth(before, after))
    name = f"{_Kept.__module__}.{_Kept.__qualname__}"
    assert grew[name] == 3000
    # each one's payload dict and list (a few unrelated ones may be freed between the counts)
    assert grew["builtins.dict"] >= 2900 and grew["builtins.list"] >= 2900
    assert grew["*"] >= 8800
    assert len(kept) == 3000


def test_census_growth_keeps_only_growth_in_order():
    import collections

    before = collections.Counter({"a": 5, "b": 10, "c": 1})
    after = collections.Counter({"a": 5, "b": 4, "c": 40, "d": 7})
    assert memory.census_growth(before, after) == [("c", 39), ("d", 7)]
    assert memory.census_growth(before, after, top=1) == [("c", 39)]


def test_proc_census_sees_a_new_thread_and_anonymous_memory():
    """Threads other tests left behind (servers, pools) may end at any moment, so the thread count is
    compared on up to five tries: one of them must see exactly the one thread started in it."""
    import threading

    threads0, anon0, maps0 = gpu_workloads.proc_census()
    assert threads0 >= 1 and anon0 > 0 and maps0 > 0
    release = threading.Event()
    started, diffs = [], []
    block = bytearray(64 << 20)  # 64 MiB, written: resident anonymous memory
    try:
        for _ in range(5):
            before = gpu_workloads.proc_census()[0]
            started.append(threading.Thread(target=release.wait))
            started[-1].start()
            diffs.append(gpu_workloads.proc_census()[0] - before)
            if diffs[-1] == 1:
                break
        assert 1 in diffs, diffs
        threads1, anon1, maps1 = gpu_workloads.proc_census()
        assert anon1 - anon0 > 48
        assert maps1 >= maps0  # a thread stack and a large block are new mappings
    finally:
        release.set()
        for t in started:
            t.join()
    assert len(block) == 64 << 20


SMAPS = """\
55d0a0000000-55d0a0002000 r--p 00000000 fe:00 42      /usr/lib/libfoo.so.1
Size:                  8 kB
Rss:                   8 kB
THPeligible:    0
VmFlags: rd mr mw me
55d0a0002000-55d0a0006000 r-xp 00002000 fe:00 42      /usr/lib/libfoo.so.1
Size:                 16 kB
Rss:                  12 kB
55d0a1000000-55d0a1400000 rw-p 00000000 00:00 0       [heap]
Rss:                2048 kB
7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n\
Size:              65536 kB
Rss:                 300 kB
7f1000000000-7f1000001000 rw-p 00000000 00:00 0
Rss:                   4 kB
7f2000000000-7f2000001000 r--p 00000000 fe:00 43      /tmp/a dir/my file (x).bin (deleted)
Rss:                   4 kB

"""


def test_smaps_census_sums_resident_memory_by_region(tmp_path):
    path = tmp_path / "smaps"
    path.write_text(SMAPS)
    got = gpu_workloads.smaps_census(str(path))
    assert got == {"libfoo.so.1": {"rss_kib": 20, "mappings": 2}, "[heap]": {"rss_kib": 2048, "mappings": 1},
                   "[anon]": {"rss_kib": 304, "mappings": 2}, "my file (x).bin": {"rss_kib": 4, "mappings": 1}}


def test_a_named_anonymous_mapping_counts_under_its_name(tmp_path):
    path = tmp_path / "smaps"
    path.write_text("7f3000000000-7f3004000000 rw-p 00000000 00:00 0       [anon:glibc: malloc arena]\nRss: 132 kB\n"
                    "7f4000000000-7f4000001000 rw-p 00000000 00:00 0\nRss: 4 kB\n")
    assert gpu_workloads.smaps_census(str(path)) == {"[anon:glibc: malloc arena]": {"rss_kib": 132, "mappings": 1},
                                                     "[anon]": {"rss_kib": 4, "mappings": 1}}


def test_smaps_growth_finds_touched_anonymous_memory():
    before = gpu_workloads.smaps_census()
    kept = bytearray(48 << 20)  # above glibc's largest mmap threshold (32 MiB): anonymous memory
    kept[::4096] = b"\x01" * (12 << 10)  # one byte a page: resident whether or not the allocation zero-filled it
    after = gpu_workloads.smaps_census()
    top = gpu_workloads.smaps_growth(before, after)[0]
    assert top["region"] == "[anon]" and top["rss_kib_diff"] >= 48 << 10
    assert len(kept) == 48 << 20


def test_a_pinned_duty_holds_whatever_the_controller_estimates():
    from types import SimpleNamespace

    from collector.control import DutyController, Estimate

    s = SimpleNamespace(controller=DutyController(2.0))
    gpu_workloads.pin_duty(s, 0.25)
    for est in (Estimate(on_s=1.0, cost_s=0.9), Estimate(on_s=1.0, cost_s=0.0)):  # far over, far under budget
        assert s.controller.update(est) == 0.25 and s.controller.duty == 0.25
