"""DDP through torchrun equals single-process training: any rank count, after a crash, across two 'nodes'."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
import torch

from gpulab.distributed.ddp.worker import choose_backend, distributed_metrics, parse_args
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
from gpulab.distributed.ddp.driver import train_ddp
from gpulab.distributed.launch.rendezvous import free_port
from gpulab.train import fit, max_abs_difference, regression_metrics

EPOCHS = 20


def single_process(recipe: Recipe) -> dict[str, torch.Tensor]:
    """The same recipe trained in this process, exactly as `gpulab train` does it."""
    data = boston_data(recipe)
    model = article_model(recipe)
    fit(model, (data.X_train, data.y_train), epochs=recipe.epochs, optimizer=optimizer_for(model, recipe),
        batch_size=recipe.batch_size, seed=recipe.seed, world_size=1, progress=False)
    return model.state_dict()



@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    return single_process(Recipe(epochs=EPOCHS))


def test_backend_choice_without_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_backend("auto", 2) == "gloo"
    assert choose_backend("gloo", 2) == "gloo"
    with pytest.raises(ValueError, match="nccl needs one CUDA device per rank"):
        choose_backend("nccl", 1)
    with pytest.raises(ValueError, match="backend='x'"):
        choose_backend("x", 1)


def test_distributed_metrics_match_plain_metrics_in_one_process():
    recipe = Recipe(epochs=1)
    data = boston_data(recipe)
    model = article_model(recipe)
    got = distributed_metrics(model, data.X_test, data.y_test, rank=0, world=1)
    want = regression_metrics(model(data.X_test), data.y_test)
    assert got == pytest.approx(want, rel=1e-9)


def test_worker_imports_no_command_line_or_launcher():
    code = "import json, sys, gpulab.distributed.ddp.worker; print(json.dumps([m for m in sys.modules if m.startswith('gpulab.')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout)
    assert "gpulab.experiment" in loaded
    launcher = [m for m in loaded if m == "gpulab.distributed.ddp.driver" or m.startswith(("gpulab.course.cli", "gpulab.distributed.launch.torchrun"))]
    assert not launcher, loaded


def test_worker_refuses_to_run_outside_torchrun(monkeypatch, capsys):
    from gpulab.distributed.ddp import worker as ddp_worker

    monkeypatch.delenv("RANK", raising=False)
    assert ddp_worker.main(["--epochs", "1"]) == 2
    assert "run me under torchrun" in capsys.readouterr().err
    assert parse_args(["--batch-size", "64"]).batch_size == 64


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:3 ranks on:UserWarning")
@pytest.mark.parametrize("nproc", [3])  # 1 rank: tests/test_crossover.py; 2 ranks: tests/test_cli_ddp.py (launches made anyway)
def test_ddp_equals_single_process(nproc, reference):
    result = train_ddp(nproc, Recipe(epochs=EPOCHS), timeout=120, echo=False)
    assert result.world_size == nproc and result.backend == "gloo"
    assert max_abs_difference(result.state_dict, reference) <= 1e-4
    assert result.history.epochs == list(range(EPOCHS))
    assert result.metrics["rmse"] == pytest.approx(result.metrics["mse"] ** 0.5)
    assert [line for line in result.lines if line.startswith("[rank 0] epoch")]  # rank 0 logs
    assert not [line for line in result.lines if line.startswith("[rank 1] epoch")]  # the others do not
    untrained = article_model(Recipe()).state_dict()
    assert max_abs_difference(result.state_dict, untrained) > 1e-2  # the comparison can fail


@pytest.mark.slow
def test_killed_worker_is_restarted_and_resumes_to_the_same_weights(tmp_path):
    recipe = Recipe(epochs=30)
    runs, killed = [], []

    def kill_rank_1_mid_training(line: str) -> None:
        if not killed and line.startswith("[rank 0] epoch  10/30"):  # epoch 10's checkpoint is on disk
            pid = runs[0].kill_rank(1)  # at once, like a crash (SIGKILL on POSIX)
            assert pid is not None
            killed.append(pid)

    result = train_ddp(2, recipe, timeout=90, checkpoint_dir=tmp_path, max_restarts=1, log_every=1,
                       on_start=runs.append, on_line=kill_rank_1_mid_training, epoch_delay=0.1)
    assert killed, "the kill never happened"
    assert any("resuming from epoch" in line for line in result.lines), result.lines
    assert 10 <= result.summary["resumed_from_epoch"] < 30
    assert result.history.epochs == list(range(30))  # one history, no epoch twice
    assert max_abs_difference(result.state_dict, single_process(recipe)) <= 1e-4


@pytest.mark.slow
def test_two_nodes_on_one_machine_equal_one_node(reference):
    port = free_port()
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def node(rank: int) -> None:
        try:
            results[rank] = train_ddp(1, Recipe(epochs=EPOCHS), timeout=120, echo=False, nnodes=2, node_rank=rank,
                                      master_addr="127.0.0.1", master_port=port)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors, errors
    head = results[0]
    assert head.world_size == 2
    assert max_abs_difference(head.state_dict, reference) <= 1e-4
    assert results[1].state_dict == {}  # rank 0 lives on node 0: only it saves
    assert any(line.startswith("[rank 0] done") for line in head.lines)
    assert not any(line.startswith("[rank 0]") for line in results[1].lines)  # node 1 holds rank 1 only


@pytest.mark.parametrize(
    "command",
    [
        "torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.ddp.worker",
        "torchrun --nproc_per_node=4 --standalone -m gpulab.distributed.ddp.worker --epochs 5",
        "python -m torch.distributed.run --standalone --nproc-per-node=4 -m gpulab.distributed.ddp.worker",
    ],
)
def test_exercise_accepts_right_commands(command):
    from gpulab.exercises.ddp import check_torchrun_command

    feedback = check_torchrun_command(command)
    assert feedback.ok and str(feedback).startswith("Correct:")


@pytest.mark.parametrize(
    "command, hint",
    [
        ("python -m torch.distributed.launch --nproc_per_node=4 main.py", "deprecated"),
        ("python main.py", "start with torchrun"),
        ("torchrun --standalone -m gpulab.distributed.ddp.worker", "--nproc-per-node"),
        ("torchrun --standalone --nproc-per-node 2 -m gpulab.distributed.ddp.worker", "asks for 4"),
        ("torchrun --nproc-per-node 4 -m gpulab.distributed.ddp.worker", "--standalone"),
        ("torchrun --standalone --nproc-per-node 4 gpulab/ddp_worker", "-m gpulab.distributed.ddp.worker"),
        ("torchrun --nproc-per-node 4 -m gpulab.distributed.ddp.worker --standalone", "--standalone"),
        ("", "one string"),
        (None, "one string"),
        ("torchrun 'unclosed", "does not parse"),
    ],
)
def test_exercise_explains_wrong_commands(command, hint):
    from gpulab.exercises.ddp import check_torchrun_command

    feedback = check_torchrun_command(command)
    assert not feedback.ok and hint in feedback.message and str(feedback).startswith("Not yet:")
