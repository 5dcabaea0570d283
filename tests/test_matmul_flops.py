"""gpulab.bench.matmul_flops: the operation count of a square matmul, checked against torch's own flop counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gpulab import bench


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_matches_torch_flop_counter(n):
    a, b = torch.randn(n, n), torch.randn(n, n)
    with FlopCounterMode(display=False) as counter:
        a @ b
    assert bench.matmul_flops(n) == counter.get_total_flops()


def test_doubling_the_side_means_eight_times_the_work():
    assert bench.matmul_flops(1024) == 8 * bench.matmul_flops(512)


@pytest.mark.parametrize("bad", [0, -3, 2.0, "512", True, None])
def test_bad_side_is_a_one_line_error_naming_the_value(bad):
    with pytest.raises(ValueError, match=r"n=.* must be a whole number >= 1") as err:
        bench.matmul_flops(bad)
    assert repr(bad) in str(err.value) and "\n" not in str(err.value)
