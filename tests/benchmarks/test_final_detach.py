"""benchmarks/final_detach.py: the marker kernel's launches are counted out of real kernel shards."""

import pyarrow as pa

from benchmarks import final_detach
from cudawatch import shards as sh

from ..test_shards import HOUR, kernel_rows


def test_marker_launches_sum_every_window_and_process_of_the_marker_only(tmp_path):
    xor = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<short, short, short, at::native::BitwiseXorFunctor<short>>>(int, T2, T3)"
    first = kernel_rows(2, kernel=xor, launches=100)  # two processes: 100 + 101
    other = kernel_rows(1, kernel="void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()", launches=7)
    sh.write_shard(tmp_path, "kernels", pa.concat_tables([first, other]), HOUR, host="h0", pid=42)
    later = kernel_rows(1, kernel=xor, launches=5, window_start=HOUR.replace(minute=10))
    sh.write_shard(tmp_path, "kernels", later, HOUR, host="h0", pid=43)
    assert final_detach.marker_launches(tmp_path) == {xor: 206}
    assert final_detach.marker_launches(tmp_path / "nothing") == {}
