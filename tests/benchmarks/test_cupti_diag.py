"""benchmarks/cupti_diag.py's CPU side: the --attr settings and the GPU memory a run of cycles kept."""

import ctypes
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import cupti_diag


def test_attrs_parse_and_a_malformed_one_is_an_error():
    assert cupti_diag.parse_attrs(["ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED=1", "ATTR_DEVICE_BUFFER_POOL_LIMIT=8"]) == {
        "ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED": 1, "ATTR_DEVICE_BUFFER_POOL_LIMIT": 8}
    for bad in ("ATTR_X", "DEVICE_BUFFER_SIZE=4", "ATTR_X=-1", "ATTR_X=big"):
        with pytest.raises(ValueError, match="--attr wants"):
            cupti_diag.parse_attrs([bad])


def test_gpu_growth_skips_the_first_cycles_one_off_allocations():
    rows = [{"gpu_delta_mib": d} for d in (12.0, 2.0, 0.0, 2.0, 0.0, 0.0, 2.0, -2.0)]
    g = cupti_diag.gpu_growth(rows)
    assert g == {"gpu_growth_after_first_cycles_mib": 2.0, "cycles_with_gpu_growth": 2, "gpu_mib_per_cycle": round(2.0 / 6, 3)}
    assert cupti_diag.gpu_growth(rows[:2])["gpu_mib_per_cycle"] is None


def test_flag_attributes_are_set_and_read_as_one_byte_the_others_as_size_t():
    assert cupti_diag._attr_ctype(SimpleNamespace(name="ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED")) is ctypes.c_uint8
    assert cupti_diag._attr_ctype(SimpleNamespace(name="ATTR_DEVICE_BUFFER_SIZE")) is ctypes.c_size_t


# §21 (docs/benchmarks.md): 60 cycles per variant on an H100, each process alone on the GPU.
S21 = Path(__file__).resolve().parents[1] / "data" / "cupti" / "bench" / "session_20261207f_h100"


def test_the_h100_cycles_keep_the_same_gpu_memory_whatever_the_buffer_attributes_and_none_without_finalize():
    runs = [json.loads((S21 / f"cycles_{k}.json").read_text()) for k in range(1, 6)]
    finalize, no_finalize = runs[:4], runs[4]
    assert [sorted(r["attrs"]) for r in finalize] == [[], [], ["ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED"],
                                                       ["ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE"]]
    for r in finalize:  # our device buffers, CUPTI's defaults, pinned host memory, no pre-allocation
        assert r["attrs"] == r["attrs_read_back"]  # each attribute was in force
        assert cupti_diag.gpu_growth(r["rows"]) == {"gpu_growth_after_first_cycles_mib": 34.0, "cycles_with_gpu_growth": 16,
                                                    "gpu_mib_per_cycle": 0.586}
    assert [r["gpu_delta_mib"] for r in no_finalize["rows"]] == [12.0] + [0.0] * 59  # once, at the first attach


def test_the_h100_cycles_keep_gpu_memory_without_records_and_do_not_level_off_in_400_cycles():
    idle = json.loads((S21 / "cycles_idle.json").read_text())
    assert idle["rows"][-1]["records"] == 0 and idle["rows"][-1]["requested"] == 0  # nothing traced, no buffer
    ours = json.loads((S21 / "cycles_1.json").read_text())
    assert [r["gpu_delta_mib"] for r in idle["rows"]] == [r["gpu_delta_mib"] for r in ours["rows"]]
    long = json.loads((S21 / "cycles_400.json").read_text())
    g = cupti_diag.gpu_growth(long["rows"])
    assert g["gpu_growth_after_first_cycles_mib"] == 230.0 and g["gpu_mib_per_cycle"] == pytest.approx(0.578, abs=1e-3)
    per_50 = [sum(r["gpu_delta_mib"] for r in long["rows"][i:i + 50]) for i in range(0, 400, 50)]
    assert min(per_50[4:]) >= min(per_50[:4]) > 20  # the last 200 cycles kept as much as the first 200


def test_kinds_parse_to_the_collectors_four_by_default_none_or_a_list():
    assert cupti_diag.parse_kinds(None) == cupti_diag.DEFAULT_KINDS == ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "OVERHEAD")
    assert cupti_diag.parse_kinds("none") == ()
    assert cupti_diag.parse_kinds(" concurrent_kernel, memcpy ") == ("CONCURRENT_KERNEL", "MEMCPY")
    with pytest.raises(ValueError, match="--kinds wants"):
        cupti_diag.parse_kinds(" , ")


def test_an_unknown_kind_stops_the_run_naming_it():
    stand_in = SimpleNamespace(ActivityKind=SimpleNamespace(MEMCPY=1))
    assert cupti_diag._kinds(stand_in, ("MEMCPY",)) == [1]
    with pytest.raises(SystemExit, match="no MEMCPYY"):
        cupti_diag._kinds(stand_in, ("MEMCPY", "MEMCPYY"))


# §22: the same 60 cycles with only some activity kinds enabled, and pausing per context (H100).
S22 = Path(__file__).resolve().parents[1] / "data" / "cupti" / "bench" / "session_20261207g_h100"


def test_the_h100_finalize_keeps_the_same_gpu_memory_whatever_kinds_are_enabled_even_none():
    ours = json.loads((S21 / "cycles_1.json").read_text())
    records = {}
    for name, kinds in (("none", []), ("CONCURRENT_KERNEL", ["CONCURRENT_KERNEL"]), ("MEMCPY_MEMSET", ["MEMCPY", "MEMSET"]),
                        ("OVERHEAD", ["OVERHEAD"])):
        r = json.loads((S22 / f"cycles_k_{name}.json").read_text())
        assert r["kinds"] == kinds and r["variant"] == "finalize_ours"
        assert [x["gpu_delta_mib"] for x in r["rows"][2:]] == [x["gpu_delta_mib"] for x in ours["rows"][2:]]
        records[name] = r["final"]["records"]
    assert records["none"] == 0 and records["OVERHEAD"] == 0 and records["CONCURRENT_KERNEL"] > 400_000


def test_pausing_per_context_keeps_the_gpu_flat_but_not_the_launch_path():
    ctx = json.loads((S22 / "cycles_ctx.json").read_text())
    assert ctx["variant"] == "disable_context" and ctx["final"]["records"] == ctx["final"]["valid"] > 400_000
    assert cupti_diag.gpu_growth(ctx["rows"])["gpu_growth_after_first_cycles_mib"] == 0.0
    us = json.loads((S22 / "launch_ctx.json").read_text())["us_per_launch"]
    # the untraced rate drifted over the probe (7.5 -> 10.9 us a launch): each pause against the rate measured next to it
    assert us["untraced_end"] - us["untraced"] > 3
    assert us["after_disable_context"] - us["untraced_end"] > 1 and us["after_disable"] - us["after_finalize_2"] > 1
