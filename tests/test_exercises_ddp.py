"""Notebook 05's launch exercise with a case the notebook does not print: some GPUs only, worker options."""

import pytest

from gpulab.exercises.ddp import check_torchrun_command

TASK = {"nproc": 4, "worker_args": ["--epochs", "30"], "visible_gpus": "4,5,6,7"}


@pytest.mark.parametrize("command", [
    "CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker --epochs 30",
    "env CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nproc_per_node=4 --standalone -m gpulab.distributed.ddp.worker --epochs=30",
    "CUDA_VISIBLE_DEVICES=4,5,6,7 python -m torch.distributed.run --standalone --nproc-per-node 4 "
    "-m gpulab.distributed.ddp.worker --backend nccl --epochs 30",
])
def test_right_commands(command):
    feedback = check_torchrun_command(command, **TASK)
    assert feedback.ok and str(feedback).startswith("Correct:"), feedback
    assert "cuda:0..cuda:3" in feedback.message and "--epochs 30" in feedback.message


@pytest.mark.parametrize("command, hint", [
    ("torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker --epochs 30", "start the line with CUDA_VISIBLE_DEVICES=4,5,6,7"),
    ("CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker --epochs 30", "asks for '4,5,6,7'"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc-per-node 8 -m gpulab.distributed.ddp.worker --epochs 30", "one rank per visible GPU"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc-per-node 4 --epochs 30 -m gpulab.distributed.ddp.worker", "the worker's option"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker", "pass --epochs 30"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker --epochs 20", "asks for 30"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 python -m torch.distributed.launch --nproc_per_node=4 main.py", "deprecated"),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7", "after the environment variables"),
])
def test_wrong_commands_are_named(command, hint):
    feedback = check_torchrun_command(command, **TASK)
    assert not feedback.ok and str(feedback).startswith("Not yet:")
    assert hint in feedback.message, feedback.message


def test_default_task_is_unchanged_and_ignores_extra_worker_options():
    assert check_torchrun_command("torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker --epochs 5").ok


def test_worker_args_must_be_pairs():
    with pytest.raises(ValueError, match="name/value pairs"):
        check_torchrun_command("torchrun", worker_args=["--epochs"])
