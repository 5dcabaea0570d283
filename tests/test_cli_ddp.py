"""`gpulab ddp`: bad values end with one `error:` line and exit 2; a real run writes weights and JSON."""

from __future__ import annotations

import json

import pytest
import torch

from gpulab.course.cli import main


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--nproc", "0"], "--nproc"),
        (["--nproc", "-1"], "--nproc"),
        (["--nproc", "x"], "--nproc"),
        ([], "--nproc"),
        (["--nproc", "1", "--master-port", "70000"], "--master-port"),
        (["--nproc", "1", "--nnodes", "2", "--node-rank", "2", "--master-port", "29511"], "--node-rank 2"),
        (["--nproc", "1", "--nnodes", "2"], "--master-port"),
        (["--nproc", "1", "--timeout", "0"], "--timeout"),
        (["--nproc", "1", "--epochs", "0"], "--epochs"),
        (["--nproc", "1", "--lr", "-0.1"], "--lr"),
        (["--nproc", "1", "--max-restarts", "-1"], "--max-restarts"),
        (["--nproc", "1", "--backend", "mpi"], "--backend"),
    ],
)
def test_bad_values_exit_2_with_one_error_line(argv, needle, capsys):
    code = exit_code(["ddp", *argv])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err


def exit_code(argv: list[str]) -> int:
    """What `gpulab ...argv` exits with (argparse errors raise SystemExit, run() returns)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_nccl_without_enough_gpus_is_an_error(capsys, monkeypatch):
    from gpulab.distributed.launch import command as torchrun_command

    monkeypatch.setattr(torchrun_command, "gpu_count", lambda: 0)
    assert exit_code(["ddp", "--nproc", "2", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "need 2 GPUs" in err[0]


@pytest.mark.parametrize("gpus, nproc, backend, says", [
    (1, 2, "gloo", True),   # one GPU, two ranks: auto falls back to gloo on the CPU, and says so
    (0, 2, "gloo", False),  # no GPU: gloo is the only choice, nothing to say
    (2, 2, "nccl", False),  # one GPU per rank: nccl
])
def test_auto_backend_fallback_is_said_clearly(gpus, nproc, backend, says, capsys, monkeypatch):
    from gpulab.distributed.launch import torchrun
    from gpulab.distributed.launch import command as torchrun_command

    launched = []
    monkeypatch.setattr(torchrun_command, "gpu_count", lambda: gpus)
    monkeypatch.setattr(torchrun, "launch", lambda target, args, **kw: launched.append((args, kw)))
    assert exit_code(["ddp", "--nproc", str(nproc), "--epochs", "1"]) == 0
    args, kw = launched[0]
    assert args[args.index("--backend") + 1] == backend and kw["backend"] == backend
    out = capsys.readouterr().out
    if says:
        assert "note: 2 ranks but 1 CUDA GPU(s)" in out and "on the CPU with gloo" in out and "--nproc 1" in out
    else:
        assert "note:" not in out


def test_train_ddp_says_so_too(monkeypatch):
    from gpulab.distributed.ddp import driver as ddp
    from gpulab.distributed.launch import command as torchrun_command

    monkeypatch.setattr(torchrun_command, "gpu_count", lambda: 1)
    seen = []

    class Stop(Exception):
        pass

    def no_launch(*args, **kwargs):
        raise Stop

    from gpulab.distributed.launch import torchrun

    monkeypatch.setattr(torchrun, "launch", no_launch)
    with pytest.raises(Stop):
        ddp.train_ddp(2, on_line=seen.append)
    assert seen and seen[0].startswith("note: 2 ranks but 1 CUDA GPU(s)")


@pytest.mark.slow
def test_real_run_writes_weights_and_json(tmp_path, capfd):
    save, summary = tmp_path / "model.pt", tmp_path / "out" / "run.json"
    code = main(["ddp", "--nproc", "2", "--epochs", "3", "--batch-size", "64", "--save", str(save),
                 "--json", str(summary), "--timeout", "120"])
    out = capfd.readouterr().out
    assert code == 0, out
    assert "[rank 0] epoch   3/3" in out and "[rank 0] done: test RMSE" in out
    state = torch.load(save, weights_only=True)
    assert set(state) == {f"layer{i}.0.{p}" for i in (1, 2, 3) for p in ("weight", "bias")}
    info = json.loads(summary.read_text())
    assert info["world_size"] == 2 and info["recipe"]["batch_size"] == 64 and len(info["history"]["loss"]) == 3
    # The 2-rank case of tests/test_ddp.py's equality, in this launch: the same weights as one process.
    from gpulab.experiment import Recipe, setup
    from gpulab.train import max_abs_difference

    single = setup(Recipe(epochs=3, batch_size=64))
    single.fit(progress=False)
    assert max_abs_difference(state, single.model.state_dict()) <= 1e-4
    assert max_abs_difference(state, setup(Recipe()).model.state_dict()) > 1e-3  # the comparison can fail
    assert info["metrics"]["rmse"] == pytest.approx(info["metrics"]["mse"] ** 0.5)
    assert "[rank 1] epoch" not in out  # only rank 0 logs
