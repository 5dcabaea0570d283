"""Every CUDA path of gpulab, run for real on a machine with an NVIDIA (or ROCm) GPU.

All tests here are marked ``gpu`` and skipped where CUDA is missing; run them with
``pytest -m gpu`` (``scripts/gpu_check.sh`` does). Multi-GPU parts also skip on one GPU.
No assertion depends on how fast anything is: speed figures go to ``gpulab bench`` JSON.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gpulab import bench, devices, memory, pinning, precision
from gpulab import data_parallel as parallel
from gpulab.models import Net1
from gpulab.train import fit

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA device")]


def gpu_count() -> int:
    return torch.cuda.device_count() if CUDA else 0


multi_gpu = pytest.mark.skipif(gpu_count() < 2, reason="needs at least 2 CUDA devices")


# ----------------------------------------------------------------------------- devices


def test_pick_device_cuda_names():
    assert devices.pick_device("cuda") == torch.device("cuda", 0)
    assert devices.pick_device("cuda:0") == torch.device("cuda", 0)
    assert devices.pick_device("auto").type == "cuda"
    last = gpu_count() - 1
    assert devices.pick_device(f"cuda:{last}") == torch.device("cuda", last)
    with pytest.raises(ValueError, match="not available"):
        devices.pick_device(f"cuda:{gpu_count()}")


def test_list_devices_reports_every_gpu_then_cpu():
    found = devices.list_devices()
    cuda = [d for d in found if d.kind == "cuda"]
    assert [d.name for d in cuda] == [f"cuda:{i}" for i in range(gpu_count())]
    assert all(d.memory_bytes and d.memory_bytes > 0 for d in cuda)
    assert all(d.capability and "." in d.capability for d in cuda)
    assert found[-1].kind == "cpu"
    assert devices.cuda_backend() is not None


def test_tensor_moves_to_gpu_and_back():
    x = torch.arange(6.0).reshape(2, 3)
    on_gpu = x.to(devices.pick_device("cuda"))
    assert on_gpu.is_cuda
    assert torch.equal((on_gpu * 2).cpu(), x * 2)


# ----------------------------------------------------------------------------- timing


def test_synchronize_waits_for_queued_work():
    device = devices.pick_device("cuda")
    a = torch.randn(2048, 2048, device=device)
    for _ in range(5):
        a = a @ a / 2048
    devices.synchronize(device)
    assert torch.cuda.current_stream(device).query()  # nothing left in the queue


def test_matmul_probe_on_cuda():
    result = bench.matmul_probe("cuda", size=1024, dtype="float32", min_run_time=0.05)
    assert result.device == "cuda:0"
    assert result.unit == "GFLOP/s"
    assert result.seconds > 0 and result.rate > 0 and result.repeats > 0
    assert result.description == torch.cuda.get_device_name(0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_probe_half_on_cuda(dtype):
    if dtype == "bfloat16" and not precision.bf16_supported("cuda"):
        pytest.skip("bfloat16 needs compute capability >= 8.0")
    result = bench.matmul_probe("cuda", size=1024, dtype=dtype, min_run_time=0.05)
    assert result.dtype == dtype and result.rate > 0


# ----------------------------------------------------------------------------- copies and pinning


@pytest.mark.parametrize("kind", ["h2d", "d2h"])
@pytest.mark.parametrize("pinned", [False, True])
def test_copy_probe_pageable_and_pinned(kind, pinned):
    result = bench.copy_probe("cuda", size_mb=64, kind=kind, pinned=pinned, min_run_time=0.05)
    assert result.kind == kind and result.pinned is pinned
    assert result.bytes_moved == 64 * 2**20
    assert result.rate > 0


def test_copy_probe_within_gpu_counts_read_and_write():
    result = bench.copy_probe("cuda", size_mb=64, kind="device", min_run_time=0.05)
    assert result.bytes_moved == 2 * 64 * 2**20 and result.rate > 0


def test_pin_memory_really_pins_and_non_blocking_copy_is_correct():
    host = torch.arange(1_000_000, dtype=torch.float32)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned()
    out = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), host)


def test_dataloader_pin_memory_gives_pinned_batches_without_warning():
    import warnings

    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pinned = [xb for xb, _ in DataLoader(data, batch_size=16, pin_memory=True)]
        plain = [xb for xb, _ in DataLoader(data, batch_size=16, pin_memory=False)]
    # The no-accelerator warning is gone. Matched exactly: torch >= 2.8 may also warn (DeprecationWarning)
    # that passing a device to Tensor.pin_memory() is deprecated, which is not what this checks.
    assert not [w for w in caught if pinning.is_no_accelerator_pin_warning(w)]
    assert all(b.is_pinned() for b in pinned)
    assert not any(b.is_pinned() for b in plain)


def test_fit_on_cuda_with_dataloader_and_pinned_memory():
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    X, y = torch.randn(256, 13), torch.randn(256, 1)
    model = Net1(13, 16, 32, 1).cuda()
    loader = DataLoader(TensorDataset(X, y), batch_size=64, pin_memory=True)
    history = fit(model, loader, epochs=3, device="cuda", progress=False)
    assert history.device == "cuda:0"
    assert len(history.loss) == 3 and all(torch.isfinite(torch.tensor(history.loss)))


# ----------------------------------------------------------------------------- training on one GPU


def test_fit_on_cuda_matches_cpu_loosely():
    torch.manual_seed(0)
    X, y = torch.randn(300, 13), torch.randn(300, 1)
    torch.manual_seed(1)
    cpu_model = Net1(13, 16, 32, 1)
    gpu_model = copy.deepcopy(cpu_model).cuda()
    fit(cpu_model, (X, y), epochs=5, device="cpu", progress=False, seed=3)
    history = fit(gpu_model, (X, y), epochs=5, device="cuda", progress=False, seed=3)
    assert history.device == "cuda:0"
    for (name, a), b in zip(cpu_model.state_dict().items(), gpu_model.state_dict().values()):
        assert b.is_cuda
        assert torch.allclose(a, b.cpu(), atol=1e-3), name


# ----------------------------------------------------------------------------- DataParallel


def test_data_parallel_wraps_the_gpus_and_matches_plain_forward():
    torch.manual_seed(0)
    model = Net1(13, 16, 32, 1).cuda()
    wrapped = nn.DataParallel(model)
    assert wrapped.device_ids == list(range(gpu_count()))
    x = torch.randn(10, 13, device="cuda")
    assert torch.allclose(wrapped(x), model(x), atol=1e-5)
    assert all(k.startswith("module.") for k in wrapped.state_dict())


@multi_gpu
def test_data_parallel_splits_batch_and_gradients_equal_full_batch():
    torch.manual_seed(0)
    n = gpu_count()
    model = Net1(13, 16, 32, 1).cuda()
    reference = copy.deepcopy(model)
    x, y = torch.randn(2 * n + 1, 13, device="cuda"), torch.randn(2 * n + 1, 1, device="cuda")
    seen: list[int] = []

    def record(_module, inputs):
        seen.append(len(inputs[0]))

    handle = model.layer1.register_forward_pre_hook(record)
    try:
        nn.functional.mse_loss(nn.DataParallel(model)(x), y).backward()
    finally:
        handle.remove()
    assert sorted(seen, reverse=True) == parallel.replica_batch_sizes(len(x), n)
    nn.functional.mse_loss(reference(x), y).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name


@multi_gpu
def test_mechanics_on_cpu_match_real_data_parallel():
    torch.manual_seed(0)
    n = gpu_count()
    model = Net1(13, 16, 32, 1)
    x, y = torch.randn(3 * n, 13), torch.randn(3 * n, 1)
    step = parallel.data_parallel_step(copy.deepcopy(model), x, y, n)
    real = model.cuda()
    nn.functional.mse_loss(nn.DataParallel(real)(x.cuda()), y.cuda()).backward()
    for name, p in real.named_parameters():
        assert torch.allclose(step.grads[name], p.grad.cpu(), atol=1e-4), name


# ----------------------------------------------------------------------------- DDP over nccl


def test_launcher_picks_nccl_when_every_rank_has_a_gpu():
    from gpulab.distributed.launch.command import check_nproc

    assert check_nproc(gpu_count(), "auto") == "nccl"
    with pytest.raises(ValueError, match="nccl"):
        check_nproc(gpu_count() + 1, "nccl")


def test_ddp_nccl_on_every_gpu_matches_one_gpu():
    from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
    from gpulab.distributed.ddp.driver import train_ddp

    n = gpu_count()
    recipe = Recipe(epochs=5)
    result = train_ddp(n, recipe, timeout=240, echo=False, backend="nccl")
    assert result.backend == "nccl" and result.world_size == n
    assert result.summary["device"].startswith("cuda")
    data = boston_data(recipe, "cuda")
    model = article_model(recipe, in_dim=data.X_train.shape[1], device="cuda")
    fit(model, (data.X_train, data.y_train), epochs=recipe.epochs, optimizer=optimizer_for(model, recipe),
        batch_size=recipe.batch_size, device="cuda", seed=recipe.seed, progress=False)
    single = model.state_dict()
    assert single.keys() == result.state_dict.keys()
    for name, value in single.items():
        # GPU kernels and the all-reduce order differ from one device: close, not bit-equal.
        assert torch.allclose(value.cpu(), result.state_dict[name], atol=1e-3), name


# ----------------------------------------------------------------------------- precision and autocast


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_on_cuda_gives_half_outputs(dtype):
    if dtype == torch.bfloat16 and not precision.bf16_supported("cuda"):
        pytest.skip("bfloat16 needs compute capability >= 8.0")
    assert precision.autocast_output_dtype("cuda", dtype) == dtype
    assert precision.autocast_matmul_seconds("cuda", dtype, n=1024, min_run_time=0.05) > 0


def test_bf16_support_agrees_with_compute_capability():
    major, _ = torch.cuda.get_device_capability(0)
    if torch.version.hip is None:
        assert precision.bf16_supported("cuda") == (major >= 8)
        assert precision.bf16_supported("cuda", native=False) is True  # emulated on older GPUs
    else:
        assert precision.bf16_supported("cuda") is True


def test_memory_table_on_cuda_reads_the_peak_and_keeps_float32_master_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1)).cuda()
    x, y = torch.randn(512, 256, device="cuda"), torch.randn(512, 1, device="cuda")
    rows = {r.variant: r for r in memory.memory_table(model, x, y, ("float32", "autocast float16", "bfloat16 weights"))}
    assert all(r.peak is not None and r.peak > 0 for r in rows.values())
    assert rows["autocast float16"].parameters == rows["float32"].parameters == 2 * rows["bfloat16 weights"].parameters
    # As on the CPU (tests/test_memory.py): the ReLU output and the model output; under autocast the
    # 2-byte copies of x, of the ReLU output and of the 2nd weight, and the output cast back to float32;
    # float16 on CUDA also trains through a GradScaler, whose loss scale (one float32) backward keeps.
    assert rows["float32"].saved_activations == 512 * 1024 * 4 + 512 * 4
    assert rows["autocast float16"].saved_activations == 512 * 256 * 2 + 512 * 1024 * 2 + 1024 * 2 + 512 * 4 + 4
    # The allocator saw at least the parameters, gradients and optimizer state that the step created.
    assert rows["float32"].peak >= rows["float32"].gradients + rows["float32"].optimizer


def test_peak_memory_sees_an_allocation_on_cuda():
    with memory.peak_memory("cuda") as peak:
        block = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del block
    assert peak.bytes >= 64 * 2**20 and peak.before is not None


def test_tf32_probe_and_matmul_modes_on_cuda():
    before = torch.get_float32_matmul_precision()
    r = bench.matmul_probe("cuda", 1024, matmul_precision="high", min_run_time=0.05)
    assert r.matmul_precision == "high" and r.label.endswith("(TF32 allowed)")
    assert torch.get_float32_matmul_precision() == before
    rows = precision.matmul_modes("cuda", 1024, min_run_time=0.05)
    assert all(row["ms"] > 0 for row in rows if row["mode"] in ("float32", "tf32", "float16", "autocast float16"))


def test_out_of_memory_on_cuda_says_so():
    with pytest.raises(ValueError, match="ran out of memory on cuda:0"):
        bench.matmul_probe("cuda", 2**20, min_run_time=0.05)  # 3 x 4 TiB
    with pytest.raises(ValueError, match="ran out of memory on cuda:0"):
        bench.copy_probe("cuda", 2**22, "device", min_run_time=0.05)  # 2 x 4 TiB on the device only
    torch.cuda.empty_cache()


def test_copies_name_pinned_and_non_blocking_apart():
    rs = [bench.copy_probe("cuda", 16, "h2d", pinned=p, non_blocking=nb, min_run_time=0.05)
          for p in (False, True) for nb in (False, True)]
    assert len({r.label for r in rs}) == 4 and all(r.rate > 0 for r in rs)
    add = bench.copy_probe("cuda", 16, "add", min_run_time=0.05)
    assert add.bytes_moved == 3 * 16 * 2**20


def test_loader_probe_with_pinned_slices_on_cuda():
    X, y = torch.randn(64, 8), torch.randn(64, 1)
    batches = list(pinning.slice_loader(X, y, 16, pin_memory=True))
    assert len(batches) == 4 and all(xb.is_pinned() and yb.is_pinned() for xb, yb in batches)
    for pin, nb in ((False, False), (True, True)):
        r = pinning.loader_probe("cuda", 16, pin_memory=pin, non_blocking=nb, min_run_time=0.05)
        assert (r.kind, r.pinned, r.non_blocking) == ("loader", pin, nb) and r.rate > 0


def test_pin_thread_pins_batches_made_by_worker_processes_on_cuda():
    loader = pinning.slice_loader(torch.randn(64, 8), torch.randn(64, 1), 16, pin_memory=True, num_workers=2)
    it = iter(loader)
    xb, yb = next(it)
    assert xb.is_pinned() and yb.is_pinned()
    assert getattr(it, "_pin_memory_thread").is_alive()  # the thread who_pins() names
    r = pinning.loader_probe("cuda", 16, pin_memory=True, non_blocking=True, num_workers=2, min_run_time=0.05)
    assert r.workers == 2 and r.rate > 0


def test_data_parallel_on_one_gpu_moves_the_module_there():
    if gpu_count() != 1:
        pytest.skip("checks the one-GPU case")
    dp = nn.DataParallel(Net1(13, 16, 32, 1))  # built on the CPU
    assert dp.device_ids == [0]
    assert all(p.device == torch.device("cuda", 0) for p in dp.module.parameters())


def test_fit_float16_on_cuda_uses_grad_scaler(monkeypatch):
    calls = {"scale": 0, "update": 0}
    real = torch.amp.GradScaler

    class Counting(real):
        def scale(self, outputs):
            calls["scale"] += 1
            return super().scale(outputs)

        def update(self, new_scale=None):
            calls["update"] += 1
            return super().update(new_scale)

    monkeypatch.setattr(torch.amp, "GradScaler", Counting)
    torch.manual_seed(0)
    X, y = torch.randn(512, 13), torch.randn(512, 1)
    model = Net1(13, 16, 32, 1).cuda()
    history = fit(model, (X, y), epochs=4, batch_size=128, device="cuda", autocast_dtype=torch.float16, progress=False)
    assert calls["scale"] == calls["update"] == 4 * 4
    assert all(torch.isfinite(torch.tensor(history.loss)))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32


def test_fit_bfloat16_on_cuda_needs_no_scaler(monkeypatch):
    if not precision.bf16_supported("cuda"):
        pytest.skip("bfloat16 needs compute capability >= 8.0")

    def no_scaler(*args, **kwargs):
        raise AssertionError("bfloat16 has float32's range: no GradScaler should be made")

    monkeypatch.setattr(torch.amp, "GradScaler", no_scaler)
    torch.manual_seed(0)
    X, y = torch.randn(256, 13), torch.randn(256, 1)
    model = Net1(13, 16, 32, 1).cuda()
    history = fit(model, (X, y), epochs=3, device="cuda", autocast_dtype=torch.bfloat16, progress=False)
    assert all(torch.isfinite(torch.tensor(history.loss)))


def test_float16_overflow_is_the_same_on_gpu():
    big = torch.tensor([70000.0, 65504.0], device="cuda").half()
    assert torch.isinf(big[0]) and big[1].item() == 65504.0
    assert torch.tensor(1e-8, device="cuda").half().item() == 0.0
