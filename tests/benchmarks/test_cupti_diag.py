"""benchmarks/cupti_diag.py's CPU side: the --attr settings and the GPU memory a run of cycles kept."""

import pytest

from benchmarks import cupti_diag


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
    import ctypes
    from types import SimpleNamespace

    assert cupti_diag._attr_ctype(SimpleNamespace(name="ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED")) is ctypes.c_uint8
    assert cupti_diag._attr_ctype(SimpleNamespace(name="ATTR_DEVICE_BUFFER_SIZE")) is ctypes.c_size_t
