"""The hardware exercises' checks, with right and wrong answers."""

from __future__ import annotations

import torch

from gpulab.exercises import Feedback
from gpulab.exercises.devices import check_device_picker, check_matmul_flops, expected_pick


def good_pick(prefer, cuda, mps, xpu):
    if prefer == "auto":
        for kind, ok in (("cuda", cuda), ("mps", mps), ("xpu", xpu)):
            if ok:
                return torch.device(kind)
        return torch.device("cpu")
    if prefer in ("cuda", "mps", "xpu") and {"cuda": cuda, "mps": mps, "xpu": xpu}[prefer]:
        return torch.device(prefer)
    return torch.device("cpu")


def test_expected_pick_rule():
    assert expected_pick("auto", True, True, True) == torch.device("cuda")
    assert expected_pick("auto", False, True, True) == torch.device("mps")
    assert expected_pick("auto", False, False, True) == torch.device("xpu")
    assert expected_pick("auto", False, False, False) == torch.device("cpu")
    assert expected_pick("mps", True, False, False) == torch.device("cpu")
    assert expected_pick("cpu", True, True, True) == torch.device("cpu")


def test_a_correct_picker_passes():
    fb = check_device_picker(good_pick)
    assert isinstance(fb, Feedback) and fb.ok and str(fb).startswith("Correct:")


def test_an_indexed_device_is_fine():
    def indexed(prefer, cuda, mps, xpu):
        d = good_pick(prefer, cuda, mps, xpu)
        return torch.device(d.type, 0) if d.type in ("cuda", "xpu") else d

    assert check_device_picker(indexed).ok


def test_the_stub_returning_none_is_not_yet():
    fb = check_device_picker(lambda prefer, cuda, mps, xpu: None)
    assert not fb.ok and str(fb).startswith("Not yet:") and "None" in fb.message


def test_the_article_one_liner_misses_mps_and_xpu():
    fb = check_device_picker(lambda prefer, cuda, mps, xpu: torch.device("cuda" if cuda else "cpu"))
    assert not fb.ok and "expected" in fb.message


def test_wrong_order_is_caught():
    def mps_first(prefer, cuda, mps, xpu):
        if prefer == "auto" and mps:
            return torch.device("mps")
        return good_pick(prefer, cuda, mps, xpu)

    fb = check_device_picker(mps_first)
    assert not fb.ok and "cuda" in fb.message and "mps" in fb.message


def test_no_fallback_is_caught():
    def no_fallback(prefer, cuda, mps, xpu):
        return torch.device(prefer) if prefer != "auto" else good_pick(prefer, cuda, mps, xpu)

    fb = check_device_picker(no_fallback)
    assert not fb.ok and "expected cpu" in fb.message


def test_strings_exceptions_and_non_callables_give_feedback():
    assert "torch.device('cpu')" in check_device_picker(lambda p, c, m, x: "cpu").message
    fb = check_device_picker(lambda p, c, m, x: 1 / 0)
    assert not fb.ok and "ZeroDivisionError" in fb.message
    assert not check_device_picker(torch.device("cpu")).ok


def test_matmul_flops_right_and_wrong():
    assert check_matmul_flops(lambda n: 2 * n**3).ok
    assert check_matmul_flops(lambda n: 2.0 * n**3).ok
    fb = check_matmul_flops(lambda n: n**3)
    assert not fb.ok and "additions" in fb.message
    assert not check_matmul_flops(lambda n: 2 * n**2).ok
    assert "None" in check_matmul_flops(lambda n: None).message
    assert not check_matmul_flops(lambda n: [][0]).ok
    assert not check_matmul_flops(42).ok
    assert "returned '2' (str)" in check_matmul_flops(lambda n: str(2 * n**3)).message


def test_matmul_flops_feedback_never_says_the_right_count():
    fb = check_matmul_flops(lambda n: n**3 + 1)  # right for n=1, wrong for n=2
    assert not fb.ok and fb.message.startswith("n=2: 9 is not the count") and "16" not in fb.message
    fb = check_matmul_flops(lambda n: 2 * n**3 if n < 10 else 0)
    assert not fb.ok and "2000" not in fb.message and "2,000" not in fb.message
