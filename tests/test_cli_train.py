"""`gpulab train`: trains the shared recipe, reports metrics, writes files, rejects bad values."""

import json
import subprocess
import sys

import pytest
import torch

from gpulab.course.cli import main
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
from gpulab.train import evaluate, fit

FAST = ["--device", "cpu", "--epochs", "2", "--no-progress"]


def test_train_reports_rmse_and_r2(capsys):
    assert main(["train", *FAST]) == 0
    out = capsys.readouterr().out
    assert "test RMSE" in out and "R²" in out and "train" in out


def test_saved_weights_equal_the_shared_recipe_run(tmp_path, capsys):
    """The contract with `gpulab ddp`: same recipe -> same weights as experiment + fit, world_size 1."""
    path = tmp_path / "net.pt"
    assert main(["train", *FAST, "--epochs", "3", "--seed", "5", "--batch-size", "64", "--lr", "0.02",
                 "--save", str(path)]) == 0
    saved = torch.load(path, weights_only=True)
    recipe = Recipe(epochs=3, batch_size=64, lr=0.02, seed=5)
    data = boston_data(recipe)
    model = article_model(recipe)
    fit(model, (data.X_train, data.y_train), epochs=3, optimizer=optimizer_for(model, recipe),
        batch_size=64, seed=5, device="cpu", progress=False)
    expected = model.state_dict()
    assert list(saved) == list(expected)
    for k in expected:
        assert torch.equal(saved[k], expected[k])
    out = capsys.readouterr().out
    m = evaluate(model, data.X_test, data.y_test)
    assert f"test RMSE {m['rmse']:.3f}" in out


def test_json_has_recipe_device_history_metrics(tmp_path, capsys):
    path = tmp_path / "sub" / "run.json"
    assert main(["train", *FAST, "--seed", "1", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert doc["recipe"] == Recipe(epochs=2, seed=1).to_dict()
    assert doc["device"] == "cpu"
    assert doc["history"]["epochs"] == [0, 1] and len(doc["history"]["loss"]) == 2
    assert set(doc["metrics"]) == {"mse", "rmse", "r2"}
    assert doc["metrics"]["rmse"] ** 2 == pytest.approx(doc["metrics"]["mse"])
    assert doc["train_seconds"] > 0
    assert not list(path.parent.glob("*.tmp"))


def test_same_seed_same_weights_different_seed_differs(tmp_path, capsys):
    paths = [tmp_path / f"{i}.pt" for i in range(3)]
    for path, seed in zip(paths, [0, 0, 1]):
        assert main(["train", *FAST, "--seed", str(seed), "--save", str(path)]) == 0
    a, b, c = (torch.load(p, weights_only=True) for p in paths)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_no_b_trains_on_12_features(tmp_path, capsys):
    path, js = tmp_path / "nob.pt", tmp_path / "nob.json"
    assert main(["train", *FAST, "--no-b", "--save", str(path), "--json", str(js)]) == 0
    assert torch.load(path, weights_only=True)["layer1.0.weight"].shape == (16, 12)
    doc = json.loads(js.read_text())
    assert doc["recipe"]["drop_b"] is True and "B" not in doc["feature_names"]
    assert "without B" in capsys.readouterr().out


def test_data_parallel_saves_without_module_prefix(tmp_path, capsys):
    plain, dp = tmp_path / "plain.pt", tmp_path / "dp.pt"
    assert main(["train", *FAST, "--save", str(plain)]) == 0
    assert main(["train", *FAST, "--data-parallel", "--save", str(dp)]) == 0
    a, b = torch.load(plain, weights_only=True), torch.load(dp, weights_only=True)
    assert not any(k.startswith("module.") for k in b)
    assert list(a) == list(b)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    assert "DataParallel" in capsys.readouterr().out


@pytest.mark.parametrize("args,word", [
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "-1"], "--epochs"),
    (["--epochs", "x"], "--epochs"),
    (["--batch-size", "0"], "--batch-size"),
    (["--lr", "0"], "--lr"),
    (["--lr", "abc"], "--lr"),
    (["--seed", "-2"], "--seed"),
    (["--device", "gpu"], "gpu"),
    (["--device", "cuda:99"], "cuda:99"),
])
def test_bad_values_exit_2_with_one_error_line(args, word, capsys):
    with pytest.raises(SystemExit) as info:
        code = main(["train", "--no-progress", "--epochs", "1", *args])
        raise SystemExit(code)
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and word in lines[0]
    assert "test RMSE" not in captured.out


def test_python_m_gpulab_train_subprocess(tmp_path):
    js = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "--epochs", "2", "--device", "cpu", "--no-progress",
         "--json", str(js)],
        capture_output=True, text=True, timeout=120,
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    assert "test RMSE" in proc.stdout
    assert json.loads(js.read_text())["history"]["epochs"] == [0, 1]
