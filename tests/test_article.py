"""The article's loop: a per-batch loss.item() only as an option; its (n,) labels broadcast against (n, 1) outputs."""

import contextlib

import pytest
import torch

from gpulab.article import article_loader, mse_as_given, train_article
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for

RECIPE = Recipe(epochs=3)


def _train(**kwargs):
    data = boston_data(RECIPE)
    loader = article_loader(data.X_train, data.y_train, batch_size=RECIPE.batch_size, seed=0)
    model = article_model(RECIPE)
    history = train_article(model, loader, epochs=RECIPE.epochs, optimizer=optimizer_for(model, RECIPE), **kwargs)
    return model, history, len(loader)


def test_per_batch_item_changes_nothing_but_the_waiting():
    plain, h_plain, _ = _train()
    synced, h_synced, _ = _train(loss_item_per_batch=True)
    assert h_plain.loss == pytest.approx(h_synced.loss, rel=1e-6)  # one sums in float32 on the device, one in Python floats
    for a, b in zip(plain.state_dict().values(), synced.state_dict().values()):
        assert torch.equal(a, b)
    assert h_plain.loss[-1] < h_plain.loss[0]  # it trains
    assert h_plain.epochs == [0, 1, 2] and len(h_plain.seconds) == 3


def _loss_reads(monkeypatch, **kwargs) -> tuple[int, int]:
    """How many times ``.item()`` is called on a tensor still in the autograd graph (the batch loss)."""
    calls = []
    original = torch.Tensor.item

    def counting(self):
        if self.grad_fn is not None:
            calls.append(type(self.grad_fn).__name__)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "item", counting)
    _, _, batches = _train(**kwargs)
    monkeypatch.undo()
    return len(calls), batches


def test_article_loop_reads_no_loss_inside_the_batch_loop(monkeypatch):
    calls, _ = _loss_reads(monkeypatch)
    assert calls == 0


def test_option_reads_the_loss_after_every_batch(monkeypatch):
    calls, batches = _loss_reads(monkeypatch, loss_item_per_batch=True)
    assert batches > 1 and calls == RECIPE.epochs * batches


@pytest.mark.parametrize("kwargs,word", [
    ({"epochs": -1}, "epochs"), ({"epochs": 1.5}, "epochs"), ({"epochs": True}, "epochs"),
    ({"loss_item_per_batch": "yes"}, "loss_item_per_batch"),
])
def test_bad_arguments_are_named(kwargs, word):
    data = boston_data(RECIPE)
    loader = article_loader(data.X_train, data.y_train)
    with pytest.raises(ValueError, match=word):
        train_article(article_model(RECIPE), loader, **kwargs)


def test_loader_rejects_bad_batch_and_mismatched_rows():
    with pytest.raises(ValueError, match="batch_size"):
        article_loader(torch.zeros(4, 2), torch.zeros(4, 1), batch_size=0)
    with pytest.raises(ValueError, match="rows"):
        article_loader(torch.zeros(4, 2), torch.zeros(3, 1))


def test_article_labels_broadcast_to_every_pair_and_warn():
    out = torch.tensor([[1.0], [2.0], [4.0]])  # (3, 1), like the model's output
    labels = torch.tensor([1.0, 2.0, 5.0])  # (3,), like the article's labels
    r = mse_as_given(out, labels)
    assert (r.output_shape, r.target_shape, r.compared_shape) == ((3, 1), (3,), (3, 3))
    assert "different to the input size" in r.warning
    every_pair = sum((o - t) ** 2 for o in (1.0, 2.0, 4.0) for t in (1.0, 2.0, 5.0)) / 9
    assert r.loss_as_given == pytest.approx(every_pair)
    assert r.loss_matched == pytest.approx(((4.0 - 5.0) ** 2) / 3)


def test_matching_shapes_give_one_loss_and_no_warning():
    out, labels = torch.randn(5, 1), torch.randn(5, 1)
    r = mse_as_given(out, labels)
    assert r.warning is None and r.compared_shape == (5, 1)
    assert r.loss_as_given == pytest.approx(r.loss_matched)


def test_mse_as_given_rejects_different_sizes():
    with pytest.raises(ValueError, match="as many values"):
        mse_as_given(torch.zeros(4, 1), torch.zeros(3))


def test_training_on_the_article_labels_predicts_the_mean():
    data = boston_data(RECIPE)
    histories, spreads = {}, {}
    for name, y in (("matched", data.y_train), ("article", data.y_train.reshape(-1))):
        model = article_model(RECIPE)
        loader = article_loader(data.X_train, y, seed=0)
        with pytest.warns(UserWarning, match="different to the input size") if name == "article" else contextlib.nullcontext():
            histories[name] = train_article(model, loader, epochs=30, optimizer=optimizer_for(model, RECIPE))
        with torch.no_grad():
            spreads[name] = model(data.X_test).std().item()
    assert spreads["article"] < 0.5 * spreads["matched"]  # collapsed towards one value: the mean label
    assert histories["article"].loss[-1] > histories["matched"].loss[-1]


def test_compare_loops_times_every_loop_and_keeps_its_model():
    from gpulab.article import LOOPS, compare_loops

    r = compare_loops("cpu", epochs=2, repeats=1)
    assert list(r["seconds"]) == list(LOOPS) and all(s > 0 for s in r["seconds"].values())
    assert set(r["models"]) == set(LOOPS) and r["batches_per_epoch"] == 4
    with pytest.raises(ValueError, match="repeats=0"):
        compare_loops("cpu", epochs=1, repeats=0)


H200_ROWS = [  # as scripts/gpu_measure.py records the boston_loop step (gpulab/reference/nvidia-h200-measure.json)
    {"device": device, "loop": loop, "epochs_per_s": rate}
    for device, rates in (("cuda:0", (150.8, 142.5, 166.6)), ("cpu", (115.8, 118.2, 157.8)))
    for loop, rate in zip(("article", "article + loss.item()", "gpulab fit"), rates)
]


def test_recorded_rows_become_rates_by_device_and_loop():
    from gpulab.article import loop_rates

    rates = loop_rates(H200_ROWS)
    assert list(rates) == ["cuda:0", "cpu"] and rates["cpu"]["gpulab fit"] == 157.8


@pytest.mark.parametrize("ratio, words", [(0.4, "slower"), (0.95, "no faster"), (1.06, "no faster"),
                                          (1.3, "only a little faster"), (2.0, "faster"), (150.0, "faster")])
def test_speed_words(ratio, words):
    from gpulab.article import speed_words

    assert speed_words(ratio) == words


def test_rates_table_says_the_gpu_gains_little_for_this_model_and_what_loss_item_costs():
    from gpulab.article import loop_rates, rates_table

    lines = rates_table(loop_rates(H200_ROWS)).splitlines()
    assert "cuda:0 epochs/s" in lines[0] and "cuda:0 / cpu" in lines[0]
    assert lines[2].startswith("article ") and lines[2].endswith("1.30x: only a little faster")
    assert lines[4].startswith("gpulab fit") and lines[4].endswith("1.06x: no faster")
    assert lines[-1] == ("with loss.item() after every step, the article loop ran 5.5% slower on cuda:0, "
                         "2.1% faster on cpu")


def test_rates_table_on_a_cpu_alone_has_no_ratio_and_rejects_missing_loops():
    from gpulab.article import rates_table

    cpu = {"cpu": {"article": 200.0, "article + loss.item()": 190.0, "gpulab fit": 280.0}}
    text = rates_table(cpu)
    assert " / cpu" not in text and "x:" not in text and text.endswith("5.0% slower on cpu")
    with pytest.raises(ValueError, match="every loop"):
        rates_table({"cpu": {"article": 1.0}})
    with pytest.raises(ValueError, match="every loop"):
        rates_table({})
