"""gpulab.kernels and notebook 14's checks: where kernels run, what they move, and the checks given wrong kernels.

Kernels run where this process's Triton runs them: in the interpreter on a machine without CUDA (tests/conftest.py
sets TRITON_INTERPRET=1 before anything imports triton), compiled on a CUDA GPU. So the same tests take the
compiled path on a GPU machine. Tests marked ``gpu`` time the compiled kernels and read inductor's Triton code.
Triton has wheels for Linux only: tests that launch a kernel are skipped where it is not installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from gpulab.exercises import kernels as ex
from gpulab.exercises.quiz import check
from gpulab.kernels import measure, runtime, traffic

ROOT = Path(__file__).resolve().parents[1]

try:
    import triton
    import triton.language as tl
except ImportError:  # macOS, Windows: no wheels
    triton = tl = None

needs_triton = pytest.mark.skipif(triton is None, reason="Triton is not installed (it has wheels for Linux only)")
MODE = runtime.imported_mode()
KDEV = torch.device("cpu" if MODE == "interpreter" else "cuda")

# ----------------------------------------------------------------------------- where kernels run


@pytest.mark.parametrize("platform,name", [("darwin", "macOS"), ("win32", "Windows")])
def test_no_triton_on_macos_or_windows_says_why(platform, name):
    backend = runtime.decide("cpu", platform=platform, version=None, environ={})
    assert backend.mode == "unavailable" and not backend.ok
    assert backend.reason == f"Triton has wheels for Linux only, and this is {name}"
    with pytest.raises(runtime.TritonUnavailable) as stop:
        runtime.require(backend)
    lines = stop.value._render_traceback_()  # what Jupyter shows instead of a traceback
    assert lines[0] == f"Stopped here: {backend.reason}" and "outputs of a run on Linux" in lines[1]


def test_linux_without_triton_names_the_pinned_install():
    backend = runtime.decide("cpu", platform="linux", version=None, environ={})
    assert not backend.ok and "pip install -c constraints.txt triton==" in backend.reason


def test_the_interpreter_runs_where_there_is_no_cuda_and_the_compiler_where_there_is():
    cpu = runtime.decide("cpu", platform="linux", version="3.7.1", environ={})
    assert (cpu.mode, cpu.device.type, cpu.reason) == ("interpreter", "cpu", "")
    gpu = runtime.decide("cuda:0", platform="linux", version="3.6.0", environ={})  # a machine's own torch and triton
    assert gpu.compiled and gpu.device == torch.device("cuda:0")
    asked = runtime.decide("cuda", platform="linux", version="3.7.1", environ={"TRITON_INTERPRET": "1"})
    assert asked.mode == "interpreter" and asked.device.type == "cpu" and "4755" in asked.reason  # CPU tensors only
    mps = runtime.decide("mps", platform="linux", version="3.7.1", environ={})
    assert mps.mode == "interpreter" and mps.device.type == "cpu"


def test_an_interpreter_older_than_the_pin_is_refused():
    old = runtime.decide("cpu", platform="linux", version="3.6.0", environ={})
    assert not old.ok and "3.6.0" in old.reason and runtime.PIN in old.reason
    newer = runtime.decide("cpu", platform="linux", version="3.8.0", environ={})
    assert newer.mode == "interpreter"


def test_the_pin_is_the_one_constraints_txt_holds():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert runtime.PIN == f"triton=={pins['triton']}"
    assert runtime._release(pins["triton"])[:2] >= runtime.INTERPRETER_SINCE


def test_the_backend_says_where_in_one_line():
    line = str(runtime.Backend("interpreter", torch.device("cpu"), "3.7.1"))
    assert "TRITON_INTERPRET=1" in line and "one program instance after another" in line and "\n" not in line
    assert str(runtime.Backend("unavailable", torch.device("cpu"), None, "why")) == "Triton kernels cannot run here: why"


@needs_triton
def test_this_process_imported_triton_the_way_its_device_needs():
    assert MODE == ("compiled" if torch.cuda.is_available() else "interpreter")
    backend = runtime.prepare(KDEV)
    assert backend.ok and backend.mode == MODE and backend.device.type == KDEV.type


@needs_triton
def test_installed_size_is_read_from_the_file_list():
    assert runtime.installed_megabytes() > 100  # a compiler inside: hundreds of MB


# ----------------------------------------------------------------------------- bytes


def test_separate_softmax_moves_four_times_the_fused_kernel_and_is_a_softmax():
    x = torch.randn(64, 100)
    out, ops = traffic.count_torch_traffic(traffic.softmax_separate, x)
    assert torch.allclose(out, torch.softmax(x, dim=1), atol=1e-6)
    assert [op.name for op in ops] == ["amax", "sub", "exp", "sum", "div"]
    n, r = 64 * 100 * 4, 64 * 4
    assert sum(op.read for op in ops) == 5 * n + 2 * r and sum(op.written for op in ops) == 3 * n + 2 * r
    assert traffic.fused_row_bytes(64, 100) == 2 * n
    assert traffic.elementwise_bytes(10, inputs=2) == 120 and traffic.elementwise_bytes(10, 1, torch.float16) == 40


def test_tile_intensity_grows_with_the_tile():
    small, big = (traffic.tile_intensity(t, t, 4096, 4096, 4096) for t in (16, 128))
    assert small.flops == big.flops == 2 * 4096**3
    assert 3.9 < small.intensity < 4.0 and 31 < big.intensity < 32  # about T / 4 for float32
    assert traffic.tile_intensity(64, 64, 4096, 4096, 4096, torch.float16).intensity == pytest.approx(
        2 * traffic.tile_intensity(64, 64, 4096, 4096, 4096).intensity)
    with pytest.raises(ValueError):
        traffic.tile_intensity(0, 64, 64, 64, 64)


# ----------------------------------------------------------------------------- recorded figures


def test_recorded_reads_the_triton_step_of_a_measurement_file(tmp_path):
    from gpulab import gpu_reference

    assert measure.recorded(tmp_path) is None
    row = {"kernel": "vector add", "implementation": "Triton add_kernel", "size": "1 float32", "ms": 1.0, "rate": 2.0,
           "unit": "GB/s", "note": ""}
    data = {"format": gpu_reference.MEASURE_FORMAT, "description": "NVIDIA X", "device": "cuda:0", "created": "2027-01-01",
            "environment": {"torch": "2.13.0"}, "steps": {"triton": {"status": "ok", "rows": [row], "source": "@triton.jit"}}}
    (tmp_path / "nvidia-x-measure.json").write_text(json.dumps(data))
    where, rows, source = measure.recorded(tmp_path)
    assert "NVIDIA X" in where and rows == [row] and source == "@triton.jit"


INDUCTOR_MODULE = '''
triton_per_fused__softmax_amax_0 = async_compile.triton('triton_per_fused__softmax_amax_0', """
import triton

@triton.jit
def triton_per_fused__softmax_amax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    tl.store(out_ptr2 + (x0), tmp1, xmask)
""", device_str='cuda')
'''


def test_the_triton_kernels_of_inductor_code_are_found():
    found = measure.triton_kernels_in(INDUCTOR_MODULE)
    assert list(found) == ["triton_per_fused__softmax_amax_0"]
    src = found["triton_per_fused__softmax_amax_0"]
    assert src.startswith("@triton.jit\ndef triton_per") and src.rstrip().endswith("tmp1, xmask)")
    assert measure.triton_kernels_in("def call(args): pass") == {}


def test_gpu_rows_refuse_a_cpu():
    with pytest.raises(ValueError, match="CUDA"):
        measure.gpu_rows(torch.device("cpu"))


# ----------------------------------------------------------------------------- questions


def test_question_one_counts_instances_and_explains_wrong_counts():
    assert check("14", 1, 4).ok and check("14", 1, "4").ok
    assert "round up" in check("14", 1, 3).message
    assert "whole" in check("14", 1, 1000 / 256).message
    assert "one instance handles a whole block" in check("14", 1, 1000).message
    assert not check("14", 1, "four").ok


@pytest.mark.parametrize("number,right", [(2, "b"), (3, "b")])
def test_the_choice_questions(number, right):
    assert check("14", number, right).ok
    assert not any(check("14", number, letter).ok for letter in "abc" if letter != right)


def test_helpers_of_the_checks():
    assert [ex.blocks(n, 256) for n in (1, 256, 257, 1000)] == [1, 1, 2, 4]
    assert [ex.next_power_of_2(n) for n in (1, 2, 3, 33, 1000, 1024)] == [1, 2, 4, 64, 1024, 1024]
    t, guard = ex.guarded((2, 3), 5, torch.device("cpu"), torch.arange(6.0))
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]] and guard.tolist() == [ex.MARK] * 5


def test_checks_refuse_what_is_not_a_kernel():
    def plain(x_ptr, y_ptr, out_ptr, n, BLOCK):
        pass

    assert "@triton.jit" in ex.check_add(plain, "cpu").message
    assert "not int" in ex.check_rms_norm(3, "cpu").message


# ----------------------------------------------------------------------------- the kernels, and wrong ones

if triton is not None:
    from gpulab.kernels import programs

    @triton.jit
    def add_store_unmasked(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask))

    @triton.jit
    def add_first_block_only(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)  # forgot pid * BLOCK
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    @triton.jit
    def subtract(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) - tl.load(y_ptr + offsets, mask=mask), mask=mask)

    @triton.jit
    def writes_nothing(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pass

    @triton.jit
    def wrong_arguments(x_ptr, out_ptr, BLOCK: tl.constexpr):
        pass

    def _rms(divide_by_block=False, eps=True, load_mask=True, store_mask=True, square_root=True, mean=True):
        """An RMS-norm kernel with one chosen mistake (the defaults give the right one)."""

        @triton.jit
        def kernel(x_ptr, out_ptr, n_cols, eps_value, BLOCK: tl.constexpr, BY_BLOCK: tl.constexpr,
                   EPS: tl.constexpr, LOAD_MASK: tl.constexpr, STORE_MASK: tl.constexpr, SQRT: tl.constexpr,
                   MEAN: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            if LOAD_MASK:
                x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
            else:
                x = tl.load(x_ptr + row * n_cols + cols)
            total = tl.sum(x * x, axis=0)
            if MEAN:
                if BY_BLOCK:
                    total = total / BLOCK
                else:
                    total = total / n_cols
            if EPS:
                total = total + eps_value
            scale = total
            if SQRT:
                scale = tl.sqrt(total)
            if STORE_MASK:
                tl.store(out_ptr + row * n_cols + cols, x / scale, mask=mask)
            else:
                tl.store(out_ptr + row * n_cols + cols, x / scale)

        class Bound:  # kernel[grid](x, out, n_cols, eps, BLOCK=...) with the mistake's switches filled in
            fn = kernel.fn

            def __getitem__(self, grid):
                return lambda *args, **kw: kernel[grid](*args, **kw, BY_BLOCK=divide_by_block, EPS=eps,
                                                        LOAD_MASK=load_mask, STORE_MASK=store_mask, SQRT=square_root,
                                                        MEAN=mean)

        return Bound()


@needs_triton
def test_the_package_kernels_equal_torch():
    torch.manual_seed(0)
    x, y = torch.randn(100_003, device=KDEV), torch.randn(100_003, device=KDEV)
    assert torch.equal(programs.add(x, y), x + y)
    assert torch.equal(programs.add(x[:1000], y[:1000], block=256), x[:1000] + y[:1000])
    s = torch.randn(37, 1000, device=KDEV)
    assert torch.allclose(programs.softmax(s), torch.softmax(s, dim=1), atol=1e-6)
    a, b = torch.randn(70, 90, device=KDEV), torch.randn(90, 50, device=KDEV)
    assert torch.allclose(programs.matmul(a, b, tile=(32, 32, 32), precision="ieee"), a @ b, rtol=1e-4, atol=1e-4)
    a16, b16 = a.half(), b.half()
    assert torch.allclose(programs.matmul(a16, b16, tile=(32, 32, 32)).float(), a16.float() @ b16.float(), atol=0.05)
    assert programs.grid_1d(1025, 1024) == (2,)


@needs_triton
def test_launches_say_where_the_tensors_must_be():
    other = torch.device("meta")
    with pytest.raises(ValueError, match=f"want {KDEV.type} tensors, got meta"):
        programs.add(torch.empty(4, device=other), torch.empty(4, device=other))
    with pytest.raises(ValueError, match="1-D tensors of one shape"):
        programs.add(torch.zeros(3, device=KDEV), torch.zeros(4, device=KDEV))
    with pytest.raises(ValueError, match="2-D"):
        programs.softmax(torch.zeros(3, device=KDEV))
    with pytest.raises(ValueError, match="precision"):
        programs.matmul(torch.zeros(2, 2, device=KDEV), torch.zeros(2, 2, device=KDEV), precision="fast")


@needs_triton
def test_check_add_passes_the_package_kernel_and_names_each_mistake():
    assert ex.check_add(programs.add_kernel, KDEV).ok
    assert "past the end of out" in ex.check_add(add_store_unmasked, KDEV).message
    assert "pid * BLOCK" in ex.check_add(add_first_block_only, KDEV).message
    assert "x - y" in ex.check_add(subtract, KDEV).message
    assert "never written" in ex.check_add(writes_nothing, KDEV).message
    assert "raised" in ex.check_add(wrong_arguments, KDEV).message


@needs_triton
@pytest.mark.parametrize("mistake,said", [
    ({}, None),
    ({"divide_by_block": True}, "divide the sum by n_cols"),
    ({"eps": False}, "add eps"),
    ({"load_mask": False}, "mask the load"),
    ({"store_mask": False}, "past the end of out"),
    ({"square_root": False}, "square root"),
    ({"mean": False}, "take the mean"),
])
def test_check_rms_norm_passes_the_right_kernel_and_names_each_mistake(mistake, said):
    feedback = ex.check_rms_norm(_rms(**mistake), KDEV)
    assert feedback.ok is (said is None), feedback
    assert said is None or said in feedback.message, feedback


@needs_triton
def test_notebook_14_writes_the_package_add_kernel_and_the_stub_leaves_the_work():
    import inspect

    cells = {c.get("id"): "".join(c["source"]) for c in json.loads((ROOT / "notebooks" / "14_kernels.ipynb").read_text())["cells"]}
    package = inspect.getsource(programs.add_kernel.fn).strip()
    assert cells["k14add"].startswith(package)  # the kernel the notebook writes is the one gpu_measure.py times
    assert "tl.store" not in cells["k14stub"].split("#")[0] and "tl.store" in cells["k14sol"]


@needs_triton
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child program is Linux-only, like Triton")
def test_a_store_without_a_mask_overwrites_the_guard_and_crashes_at_a_locked_page():
    from gpulab.kernels import unmasked

    backend = runtime.Backend(MODE, KDEV, triton.__version__)
    child = unmasked.run_in_child(backend, n=1000, block=1024)
    assert child.report["reached_past_end"] == 24 and child.report["guard_overwritten"] == 24
    assert child.report["in_range_correct"] is True
    if MODE == "interpreter":
        assert child.signal == "SIGSEGV", child.stderr_tail
    else:
        assert child.returncode == 0
    with pytest.raises(ValueError):
        unmasked.run_in_child(runtime.Backend("unavailable", KDEV, None, "no"))


# ----------------------------------------------------------------------------- on a GPU, compiled


@pytest.mark.gpu
@needs_triton
def test_compiled_kernels_time_against_torch_and_tl_dot_uses_tf32():
    assert MODE == "compiled"
    cuda = torch.device("cuda")
    rows = measure.gpu_rows(cuda, small=True)
    kinds = [r["kernel"] for r in rows]
    assert kinds.count("vector add") == 2 and kinds.count("softmax over rows") == 3 and kinds.count("matmul") == 5
    assert all(r["rate"] > 0 for r in rows if r["kernel"] != "matmul error")
    errors = {r["implementation"]: r["rate"] for r in rows if r["kernel"] == "matmul error"}
    assert errors["Triton, tl.dot's default (TF32)"] > 5 * errors["Triton, input_precision=\"ieee\""]


@pytest.mark.gpu
@needs_triton
def test_inductor_writes_a_triton_kernel_for_the_separate_softmax():
    name, source = measure.inductor_kernel(traffic.softmax_separate, torch.randn(512, 1000, device="cuda"))
    assert name.startswith("triton_") and source.startswith("@triton.jit") and "tl.program_id" in source


@pytest.mark.gpu
@needs_triton
def test_the_checks_run_compiled_on_cuda():
    assert ex.check_add(programs.add_kernel, "cuda").ok
    assert "past the end" in ex.check_add(add_store_unmasked, "cuda").message
    assert ex.check_rms_norm(_rms(), "cuda").ok


@needs_triton
def test_default_tiles_fit_small_gpus_and_the_interpreter_gets_small_ones():
    assert programs.default_tile(torch.empty(1)) == programs.CPU_TILE
    for dtype, size in ((torch.float16, 2), (torch.float32, 4)):
        bm, bn, bk = programs.default_tile(torch.empty(1, dtype=dtype, device="meta"))  # not the CPU: compiled tiles
        assert 3 * (bm * bk + bk * bn) * size <= 64 * 1024  # three stages of pieces in a T4's shared memory
