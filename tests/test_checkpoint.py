"""Checkpoints: atomic names, newest found, damage reported by path, resume equals no interruption."""

from __future__ import annotations

import pytest
import torch

from gpulab.distributed.ddp import checkpoint
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
from gpulab.train import fit, max_abs_difference


def small_setup(recipe: Recipe):
    data = boston_data(recipe)
    model = article_model(recipe)
    return data, model, optimizer_for(model, recipe)


def train(recipe: Recipe, directory=None, stop_after: int | None = None, resume: bool = False):
    data, model, opt = small_setup(recipe)
    start = 0
    if resume:
        start, _ = checkpoint.resume(directory, model, opt)

    def on_end(epoch, history):
        if directory is not None:
            checkpoint.save(directory, epoch, model, opt, history.to_dict())
        return stop_after is not None and epoch + 1 >= stop_after

    fit(model, (data.X_train, data.y_train), epochs=recipe.epochs, optimizer=opt, batch_size=recipe.batch_size,
        seed=recipe.seed, progress=False, start_epoch=start, on_epoch_end=on_end, device="cpu")
    return model.state_dict(), start



def test_names_and_latest(tmp_path):
    assert checkpoint.checkpoint_path(tmp_path, 3).name == "epoch0003.pt"
    assert checkpoint.latest(tmp_path) is None
    assert checkpoint.latest(tmp_path / "missing") is None
    recipe = Recipe(epochs=5)
    train(recipe, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["epoch0003.pt", "epoch0004.pt"]  # keep=2, no temporary files left behind
    assert checkpoint.latest(tmp_path).name == "epoch0004.pt"
    state = checkpoint.load(checkpoint.latest(tmp_path))
    assert state["epoch"] == 4 and len(state["history"]["loss"]) == 5
    assert set(state["model"]) == set(article_model(recipe).state_dict())


def test_latest_ignores_temporary_and_foreign_files(tmp_path):
    (tmp_path / ".epoch0009.pt.abc.tmp").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "epoch12.pt").write_bytes(b"")  # fewer than 4 digits: not ours
    assert checkpoint.latest(tmp_path) is None


def test_resume_equals_uninterrupted(tmp_path):
    recipe = Recipe(epochs=12)
    whole, _ = train(recipe)
    train(recipe, tmp_path, stop_after=5)
    assert checkpoint.latest(tmp_path).name == "epoch0004.pt"
    resumed, start = train(recipe, tmp_path, resume=True)
    assert start == 5
    assert max_abs_difference(whole, resumed) <= 1e-6
    interrupted_only, _ = train(recipe, None, stop_after=5)
    assert max_abs_difference(whole, interrupted_only) > 1e-3  # the comparison can fail


def test_resume_without_checkpoint_starts_at_zero(tmp_path):
    data, model, opt = small_setup(Recipe(epochs=1))
    assert checkpoint.resume(tmp_path, model, opt) == (0, {})


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "not_a_checkpoint", "wrong_epoch"])
def test_damaged_checkpoint_reported_by_path(tmp_path, damage):
    recipe = Recipe(epochs=2)
    train(recipe, tmp_path)
    path = checkpoint.latest(tmp_path)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00" * 64 + raw[64:])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "not_a_checkpoint":
        torch.save({"weights": torch.zeros(2)}, path)
    else:
        torch.save(checkpoint.load(tmp_path / "epoch0000.pt"), path)
    with pytest.raises(checkpoint.CheckpointError, match=str(path)):
        checkpoint.load(path)
    _, model, opt = small_setup(recipe)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(checkpoint.CheckpointError, match="epoch0001.pt"):
        checkpoint.resume(tmp_path, model, opt)
    assert max_abs_difference(before, model.state_dict()) == 0.0  # nothing was loaded


def test_unsafe_pickle_is_refused(tmp_path):
    path = tmp_path / "epoch0000.pt"
    torch.save({"model": {}, "optimizer": {}, "epoch": 0, "rng": {}, "history": {}, "code": print}, path)
    with pytest.raises(checkpoint.CheckpointError, match="epoch0000.pt"):
        checkpoint.load(path)


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="no such checkpoint"):
        checkpoint.load(tmp_path / "epoch0001.pt")
    with pytest.raises(ValueError, match="epoch=-1"):
        checkpoint.checkpoint_path(tmp_path, -1)
    _, model, opt = small_setup(Recipe(epochs=1))
    with pytest.raises(ValueError, match="keep=0"):
        checkpoint.save(tmp_path, 0, model, opt, keep=0)


def test_rng_state_round_trip():
    state = checkpoint.rng_state()
    a = torch.rand(3)
    checkpoint.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))


def test_a_cpu_rank_never_asks_cuda_for_its_rng_state(tmp_path, monkeypatch, cuda_reported):
    """A gloo rank on a GPU machine trains on the CPU: saving or resuming must not create a CUDA context."""
    def no_cuda(name):
        def refuse(*args, **kwargs):
            raise AssertionError(f"a CPU model's checkpoint called torch.cuda.{name}")
        return refuse

    # cuda_reported: a GPU machine ...
    for name in ("get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all"):
        monkeypatch.setattr(torch.cuda, name, no_cuda(name))
    recipe = Recipe(epochs=2)
    train(recipe, tmp_path)  # ... where this model trains on the CPU
    state = checkpoint.load(checkpoint.latest(tmp_path))
    assert set(state["rng"]) == {"torch"}
    _, model, opt = small_setup(recipe)
    assert checkpoint.resume(tmp_path, model, opt)[0] == 2


def test_a_cuda_model_keeps_the_rng_state_of_its_own_device_only(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: asked.append(device) or torch.zeros(8, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("every GPU was asked"))
    state = checkpoint.rng_state(torch.device("cuda", 1))
    assert asked == [torch.device("cuda", 1)] and set(state) == {"torch", "cuda"}
    restored = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: restored.append(device))
    checkpoint.set_rng_state(state, torch.device("cuda", 1))
    checkpoint.set_rng_state(state, None)  # resumed on a machine without that GPU: the CPU state only
    assert restored == [torch.device("cuda", 1)]
