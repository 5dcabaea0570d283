"""gpulab.profiling.compiled_code: the kernels in inductor's code, the graphs TorchDynamo compiles, its graph breaks."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.profiling import compiled_code as compiled

# The shape of inductor's output code on a CPU (torch 2.13): kernels defined at the top, used in `call`.
CPU_CODE = '''# AOT ID: ['0_backward']
from torch._inductor.select_algorithm import extern_kernels
cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], r"""
extern "C" void kernel(float* in_out_ptr0) { /* addmm is not in here */ }
""")
cpp_fused_sum_threshold_backward_1 = async_compile.cpp_pybinding(['float*', 'const float*'], r"""...""")
async_compile.wait(globals())

class Runner:
    def call(self, args):
        primals_1, primals_2 = args
        buf0 = empty_strided_cpu((128, 16), (16, 1), torch.float32)
        extern_kernels.addmm(primals_2, primals_1, reinterpret_tensor(primals_1, (13, 16), (1, 13), 0), out=buf0)
        cpp_fused_relu_0(buf0)
        extern_kernels.mm(buf0, primals_1, out=buf1)
        cpp_fused_sum_threshold_backward_1(buf1, buf0)
        return (buf1, )


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
    cpp_fused_relu_0(nothing)
'''

# ... and on an NVIDIA GPU: Triton kernels, launched with `.run(`.
GPU_CODE = '''
triton_poi_fused_addmm_relu_0 = async_compile.triton('triton_poi_fused_addmm_relu_0', """...""")
def call(args):
    extern_kernels.mm(arg0_1, arg1_1, out=buf0)
    triton_poi_fused_addmm_relu_0.run(buf1, arg2_1, 2048, stream=stream0)
'''


def test_kernels_in_cpu_code_in_call_order():
    k = compiled.kernels_in(CPU_CODE)
    assert k.graph == "backward"
    assert k.calls == (("addmm", False), ("cpp_fused_relu_0", True), ("mm", False),
                       ("cpp_fused_sum_threshold_backward_1", True))
    assert k.library == ["addmm", "mm"]
    assert k.generated == ["cpp_fused_relu_0", "cpp_fused_sum_threshold_backward_1"]  # not the benchmark helper's call


def test_kernels_in_triton_code():
    k = compiled.kernels_in(GPU_CODE)
    assert k.library == ["mm"] and k.generated == ["triton_poi_fused_addmm_relu_0"] and k.graph == "graph"


@pytest.mark.parametrize("bad", ["print('no call function here')", 42, None])
def test_kernels_in_rejects_what_is_not_output_code(bad):
    with pytest.raises(ValueError, match="one module of inductor's output code"):
        compiled.kernels_in(bad)


def test_output_code_passes_the_result_through_and_says_when_torch_lacks_the_helper(monkeypatch):
    import torch._inductor.utils as inductor_utils

    monkeypatch.setattr(inductor_utils, "run_and_get_code", lambda fn: (fn(), ["# module"]))
    assert compiled.output_code(lambda: 7) == (7, ["# module"])
    monkeypatch.delattr(inductor_utils, "run_and_get_code")
    with pytest.raises(RuntimeError, match="has no torch._inductor.utils.run_and_get_code"):
        compiled.output_code(lambda: 7)


@pytest.fixture
def loader_of():
    def make(rows: int, batch: int, **kwargs) -> DataLoader:
        torch.manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(rows, 3), torch.randn(rows, 1)), batch_size=batch, **kwargs)

    return make


def test_a_short_last_batch_compiles_a_second_graph_with_a_symbolic_size(loader_of):
    graphs = compiled.recompiles(nn.Linear(3, 1), loader_of(10, 4))  # batches 4, 4, 2
    assert graphs == [compiled.CompiledGraph(4, False), compiled.CompiledGraph(2, True)]


def test_drop_last_or_dynamic_needs_one_graph(loader_of):
    assert compiled.recompiles(nn.Linear(3, 1), loader_of(10, 4, drop_last=True)) == [compiled.CompiledGraph(4, False)]
    assert compiled.recompiles(nn.Linear(3, 1), loader_of(10, 4), dynamic=True) == [compiled.CompiledGraph(4, True)]
    # equal batches only: one graph for every epoch
    assert compiled.recompiles(nn.Linear(3, 1), loader_of(8, 4), epochs=3) == [compiled.CompiledGraph(4, False)]


def test_recompiles_rejects_bad_epochs(loader_of):
    with pytest.raises(ValueError, match="epochs=0 must be a whole number >= 1"):
        compiled.recompiles(nn.Linear(3, 1), loader_of(8, 4), epochs=0)


def test_graph_recorder_runs_the_graph_unchanged():
    recorder = compiled.GraphRecorder()
    torch.compiler.reset()
    f = torch.compile(lambda x: torch.relu(x) * 2, backend=recorder)
    x = torch.tensor([-1.0, 3.0])
    assert torch.equal(f(x), torch.tensor([0.0, 6.0])) and recorder.graphs == [False]
    torch.compiler.reset()


def _chatty(x):
    y = torch.relu(x)
    print("between the two halves")
    return y * 2


def _quiet(x):
    return torch.relu(x) * 2


def test_graph_breaks_finds_the_print_and_its_line(capsys):
    found = compiled.graph_breaks(_chatty, torch.ones(3))
    assert found.graph_count == 2 and found.graph_break_count == 1
    (reason, line), = found.reasons
    assert "print" in reason and line == 'print("between the two halves")'
    assert "between the two halves" in capsys.readouterr().out  # the function really ran
    quiet = compiled.graph_breaks(_quiet, torch.ones(3))
    assert (quiet.graph_count, quiet.graph_break_count, quiet.reasons) == (1, 0, ())


def test_graph_breaks_says_when_torch_lacks_explain(monkeypatch):
    import torch._dynamo

    monkeypatch.delattr(torch._dynamo, "explain")
    with pytest.raises(RuntimeError, match="has no torch._dynamo.explain"):
        compiled.graph_breaks(_quiet, torch.ones(3))


def test_short_reason_keeps_the_explanation():
    text = "Failed to trace builtin operator\n  Explanation: Dynamo does not know `print`\n  Hint: avoid it\n"
    assert compiled._short_reason(text) == "Failed to trace builtin operator: Dynamo does not know `print`"
    assert compiled._short_reason("generic_jump TensorVariable()") == "generic_jump TensorVariable()"
    assert compiled._short_reason("") == ""
