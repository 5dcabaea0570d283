"""Tensor parallelism on CPU ranks (notebook 12): equal to one process at 2 and 4 ranks, with controls that
differ; the collectives counted by CommDebugMode equal the rules; traffic counted equals the prediction;
uneven vocabularies follow torch.chunk; the exercise check and the questions, wrong answers included."""

from __future__ import annotations

import warnings

import matplotlib
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from gpulab.distributed.tensor_parallel.driver import (count_rows, equality_rows, predicted_calls,  # noqa: E402
                                                run_tensor_parallel, saved_formula_rows, saved_rows, shard_rows,
                                                sweep_spread, traffic_rows)
from gpulab.distributed.tensor_parallel.worker import SWEEP_SIZES  # noqa: E402
from gpulab.distributed.tensor_parallel.worker import main as worker_main  # noqa: E402
from gpulab.exercises.tensor_parallel import QUESTIONS_12, check_megatron_mlp  # noqa: E402
from gpulab.figures import has_title  # noqa: E402
from gpulab.figures.tensor_parallel import STATIC, loss_curves, megatron_shards  # noqa: E402
from gpulab.tp_model import (PLANS, TinyBlock, expected_collectives, padded_head, padded_vocab,  # noqa: E402
                             saved_bytes_per_token, shard_sizes, tp_plan)

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def two():
    """One 2-rank launch of every part (the notebook's); every test that reads it is marked slow."""
    return run_tensor_parallel(2, timeout=240)


@pytest.fixture(scope="module")
def four():
    """One 4-rank launch (on 2 cores too): no traffic part, an output layer of 11 rows (3, 3, 3, 2)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*ranks on \d+ CPU cores")  # the launcher's note on a small machine
        return run_tensor_parallel(4, parts=("megatron", "block", "vocab"), steps=2, vocab=11, timeout=300)


@pytest.fixture(params=["two", "four"])
def run(request):
    return request.getfixturevalue(request.param)


# ---- equal to one process, and controls that are not --------------------------------------------------


@pytest.mark.slow
def test_megatron_by_hand_equals_one_process_with_one_all_reduce(run):
    for rank in run.megatron:
        assert rank["collectives"] == {"all_reduce": 1}
        assert rank["max_difference"] <= TOLERANCE
        assert rank["control_max_difference"] > 1e-3  # the first layer split by its inputs: GELU of partial sums
        assert rank["output"] == run.megatron[0]["output"]  # after the all-reduce every rank holds the same


@pytest.mark.slow
def test_megatron_shards_are_torch_chunk_pieces(run):
    ffn = run.megatron[0]["full_up_shape"][0]
    assert [len(r["up_weight"]) for r in run.megatron] == shard_sizes(ffn, run.ranks)
    sizes = shard_sizes(ffn, run.ranks)
    assert [r["units"] for r in run.megatron] == [[sum(sizes[:i]), sum(sizes[:i + 1])] for i in range(run.ranks)]
    assert [len(r["down_weight"][0]) for r in run.megatron] == shard_sizes(ffn, run.ranks)
    total = torch.tensor([r["partial"] for r in run.megatron]).sum(0)
    bias = torch.tensor(run.megatron[0]["output"]) - total  # down.bias, added once after the sum
    assert torch.allclose(bias, bias[0].expand_as(bias))


@pytest.mark.slow
def test_every_plan_equals_one_process_and_the_controls_differ(run):
    runs = {(r["plan"], r["dtype"], r["weighted"]): r for r in run.block}
    for plan in PLANS:
        assert runs[plan, "float32", True]["max_weight_difference"] <= TOLERANCE, plan
        assert runs[plan, "float32", True]["max_loss_difference"] <= TOLERANCE, plan
    assert runs["tp", "float64", True]["max_weight_difference"] <= 1e-12  # rounding, not a different computation
    assert runs["sp", "float32", False]["max_weight_difference"] > 1e-3  # shard losses not weighted by their share
    bug32, bug64 = (runs["sp", dtype, False]["max_weight_difference"] for dtype in ("float32", "float64"))
    assert 0.5 < bug64 / bug32 < 2  # a bug does not shrink with the precision, as rounding does
    rows = equality_rows(run)
    assert len(rows) == len(run.block) and sum(r["control"] != "" for r in rows) == 2


@pytest.mark.slow
def test_collectives_counted_equal_the_rules(run):
    rows = count_rows(run)
    assert len(rows) == 3 * len(PLANS) and all(r["same"] for r in rows), rows
    naive = next(r for r in run.block if r["plan"] == "naive")
    assert naive["counts"]["backward"] == {"all_reduce": 4}  # q, k, v and up each all-reduce their input's gradient


@pytest.mark.slow
def test_what_each_rank_holds(run):
    rows = {r["parameter"]: r for r in shard_rows(run, "tp")}
    n, hidden, ffn = run.ranks, 16, 64
    assert rows["attn.q.weight"]["each rank"] == f"{hidden // n}x{hidden}"
    assert rows["attn.o.weight"]["each rank"] == f"{hidden}x{hidden // n}"
    assert rows["mlp.up.weight"]["each rank"] == f"{ffn // n}x{hidden}"
    assert rows["mlp.down.bias"]["split"] == "no" and rows["norm1.weight"]["split"] == "no"


@pytest.mark.slow
def test_shard_rows_names_the_plans_it_has(two):
    with pytest.raises(ValueError, match="plan='ddp'.*naive, sp, tp"):
        shard_rows(two, "ddp")


@pytest.mark.slow
def test_saved_bytes_equal_each_implementations_formula(run):
    rows = {r["implementation"]: r for r in saved_formula_rows(run)}
    assert [len(r["measured"]) for r in rows.values()] == [1, run.ranks, run.ranks, 0]  # Megatron's is not run
    for row in rows.values():
        assert all(m == row["formula"] for m in row["measured"]), row  # exact: storages, not estimates
    tp, torch_sp, megatron = (rows[k]["formula"] for k in ("TP (plan tp)", "torch's SP (plan sp)",
                                                           "Megatron-LM's SP (not run)"))
    assert tp > torch_sp > megatron  # the formula can tell the measured torch SP from Megatron's
    assert megatron == rows["one process"]["measured"][0] / run.ranks


@pytest.mark.slow
def test_torch_sp_keeps_the_gathered_inputs_whole(run):
    table = {r["module"]: r for r in saved_rows(run)}
    for layer in ("attn.q", "mlp.up"):  # the inputs of q, k, v and of up: the whole sequence on every rank
        assert table[layer]["sp"] == table[layer]["tp"] == table[layer]["one process"] > 0
    for norm in ("norm1", "norm2"):  # each rank its own tokens
        assert table[norm]["sp"] * run.ranks == table[norm]["tp"] == table[norm]["one process"]
    assert table["attn"]["tp"] * run.ranks == table["attn"]["one process"]  # split by heads
    assert table["total"]["tp"] == sum(r["tp"] for r in table.values() if r["module"] != "total")


@pytest.mark.slow
def test_uneven_vocabulary_follows_torch_chunk_and_equals_one_process(run):
    vocab = run.vocab[0][0]["vocab"]
    runs = run.vocab[0]
    methods = [(r["vocab"], r["method"]) for r in runs]
    assert methods[:2] == [(vocab, "gather"), (vocab, "loss_parallel")]
    assert methods[2:] == [(padded_vocab(vocab, run.ranks), "loss_parallel")]
    for i, r in enumerate(runs):
        assert [rank[i]["rows_here"] for rank in run.vocab] == shard_sizes(r["vocab"], run.ranks)
        assert r["max_weight_difference"] <= TOLERANCE and r["max_loss_difference"] <= TOLERANCE
    assert runs[0]["counts"] == {"forward": {"all_gather": 1}}
    assert runs[1]["counts"] == {"forward": {"all_reduce": 3}}  # max, sum of exponentials, target logit
    assert runs[2]["losses"][0] != pytest.approx(runs[1]["losses"][0], abs=1e-4)  # padding changes the model


@pytest.mark.slow
def test_traffic_counted_equals_the_prediction(two):
    rows = {r["plan"]: r for r in traffic_rows(two)}
    t = two.traffic
    for r in rows.values():
        assert r["calls_per_step"] == r["calls_predicted"] and r["bytes_per_step"] == r["bytes_predicted"]
        assert r["sent_per_rank"] == pytest.approx(r["sent_predicted"])
    assert rows["tp"]["bytes_predicted"] == 4 * t["activation_bytes"]
    assert rows["sp"]["sent_predicted"] == pytest.approx(rows["tp"]["sent_predicted"] + 4 * t["block"]["hidden"] * 4)
    assert rows["tp"]["predicted_ms"] > 0 and rows["tp"]["alone_ms"] > 0 and rows["tp"]["after_arrival_ms"] > 0
    assert 0 < rows["tp"]["fastest_alone_ms"] <= rows["tp"]["alone_ms"] and rows["tp"]["fastest_predicted_ms"] > 0
    spread = sweep_spread(two)
    assert [r["bytes"] for r in spread] == list(SWEEP_SIZES) and t["activation_bytes"] in SWEEP_SIZES
    assert all(r["fastest_s"] <= r["median_s"] <= r["slowest_s"] for r in spread)
    assert all(len(r["seconds"]) == 50 for r in t["sweep"])  # the default repeats


@pytest.mark.slow
def test_the_run_draws_its_own_shards(two):
    fig = megatron_shards(two.megatron)
    assert has_title(fig) and len(fig.axes) == 4 * (two.ranks + 1)


@pytest.mark.slow
def test_no_process_is_left_behind(two):
    import psutil

    assert not [p for p in psutil.Process().children(recursive=True) if "torch" in " ".join(p.cmdline())]


# ---- pure parts ---------------------------------------------------------------------------------------


def test_predicted_calls_follow_the_rules():
    assert predicted_calls("tp", 100, 8) == [("all_reduce", 100)] * 4
    assert sorted(predicted_calls("sp", 100, 8)) == sorted([("all_gather", 100)] * 4 + [("reduce_scatter", 100)] * 4
                                                           + [("all_reduce", 8)] * 4)
    assert expected_collectives("naive")["backward"] == {"all_reduce": 4}


@pytest.mark.parametrize("hidden,heads,ffn,tp", [(16, 4, 64, 2), (4096, 32, 16384, 8), (128, 8, 512, 4)])
def test_saved_bytes_per_token_forms(hidden, heads, ffn, tp):
    f = saved_bytes_per_token
    one = f(hidden, heads, ffn)
    assert one == 4 * (2 * (hidden + 2) + 2 * hidden + 4 * hidden + 2 * ffn) + 4 * heads
    assert f(hidden, heads, ffn, tp, "megatron") == pytest.approx(one / tp)  # every saved tensor split
    gathered = 2 * hidden * 4 * (1 - 1 / tp)  # q/k/v's and up's inputs, kept whole by torch's SP
    assert f(hidden, heads, ffn, tp, "torch") - f(hidden, heads, ffn, tp, "megatron") == pytest.approx(gathered)
    norms = 2 * (hidden + 2) * 4 * (1 - 1 / tp)  # the norms' inputs and statistics, whole without SP
    assert f(hidden, heads, ffn, tp) - f(hidden, heads, ffn, tp, "torch") == pytest.approx(norms)
    assert f(hidden, heads, ffn, tp, itemsize=2) == pytest.approx((f(hidden, heads, ffn, tp) - 4 * heads / tp) / 2
                                                                  + 4 * heads / tp)  # the log-sum-exp stays float32


@pytest.mark.parametrize("size,world,sizes", [(11, 2, [6, 5]), (11, 4, [3, 3, 3, 2]), (5, 4, [2, 2, 1, 0]),
                                              (8, 4, [2, 2, 2, 2]), (0, 3, [0, 0, 0])])
def test_shard_sizes_follow_torch_chunk(size, world, sizes):
    assert shard_sizes(size, world) == sizes


def test_padded_vocab_and_head():
    assert padded_vocab(50257, 2) == 50258 and padded_vocab(50257, 2, 128) == 50432 and padded_vocab(12, 4) == 12
    head = torch.nn.Linear(8, 11)
    bigger = padded_head(head, 12)
    assert bigger.weight.shape == (12, 8) and torch.equal(bigger.weight[:11], head.weight)
    x = torch.randn(5, 8)
    assert torch.allclose(bigger(x)[:, :11], head(x), atol=1e-6)
    assert torch.equal(TinyBlock(seed=4).mlp.up.weight, TinyBlock(seed=4).mlp.up.weight)


@pytest.mark.parametrize("call,match", [(lambda: tp_plan("ddp"), "unknown plan 'ddp'"),
                                        (lambda: expected_collectives("x"), "unknown plan"),
                                        (lambda: shard_sizes(-1, 2), "size=-1"),
                                        (lambda: shard_sizes(4, 0), "world=0"),
                                        (lambda: padded_vocab(10, 2, 0), "divisible_by=0"),
                                        (lambda: padded_head(torch.nn.Linear(2, 5), 4), "smaller than"),
                                        (lambda: TinyBlock(hidden=10, heads=4), "multiple of heads"),
                                        (lambda: saved_bytes_per_token(16, 4, 64, 3), "divide by tp=3"),
                                        (lambda: saved_bytes_per_token(16, 4, 64, 2, "nvidia"), "sequence_parallel"),
                                        (lambda: saved_bytes_per_token(16, 4, 64, 0), "tp=0"),
                                        (lambda: saved_bytes_per_token(16, 4, 64, itemsize=0), "itemsize=0"),
                                        (lambda: run_tensor_parallel(2, parts=("nope",)), "parts=")])
def test_bad_input_is_one_line(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_worker_outside_torchrun_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("RANK", raising=False)
    assert worker_main(["--out", str(tmp_path)]) == 2
    assert "torchrun" in capsys.readouterr().err


def test_schematics_and_curves_have_titles():
    for draw in STATIC.values():
        assert has_title(draw())
    assert has_title(loss_curves({"a": [1.0, 0.5]}))
    with pytest.raises(ValueError, match="empty"):
        loss_curves({})


# ---- the exercise check ---------------------------------------------------------------------------------


def _units(n, rank, world):
    """torch.chunk's piece ``rank`` of ``n`` units, empty where chunk returns fewer pieces than ranks."""
    size = -(-n // world)
    lo = min(rank * size, n)
    return slice(lo, min(lo + size, n))


def _hidden(x, up, rank, world):
    units = _units(up.out_features, rank, world)
    return F.gelu(x @ up.weight[units].T + up.bias[units])


def _right(x, up, down, rank, world):
    z = _hidden(x, up, rank, world) @ down.weight[:, _units(up.out_features, rank, world)].T
    return z + down.bias if rank == 0 else z


def _chunk_index(x, up, down, rank, world):
    """Right while torch.chunk returns ``world`` pieces; IndexError on 5 units over 4 ranks (pieces 2, 2, 1)."""
    h = F.gelu(x @ up.weight.chunk(world, 0)[rank].T + up.bias.chunk(world, 0)[rank])
    z = h @ down.weight.chunk(world, 1)[rank].T
    return z + down.bias if rank == 0 else z


def _bias_shared(x, up, down, rank, world):
    return _right(x, up, down, rank, world) - (down.bias if rank == 0 else 0) + down.bias / world


def _bias_last(x, up, down, rank, world):
    return _right(x, up, down, rank, world) - (down.bias if rank == 0 else 0) + (down.bias if rank == world - 1 else 0)


def _bias_everywhere(x, up, down, rank, world):
    return _right(x, up, down, rank, world) + (down.bias if rank else 0)


def _no_bias(x, up, down, rank, world):
    return _right(x, up, down, rank, world) - (down.bias if rank == 0 else 0)


def _whole(x, up, down, rank, world):
    return down(F.gelu(up(x)))


def _no_gelu(x, up, down, rank, world):
    units = _units(up.out_features, rank, world)
    z = (x @ up.weight[units].T + up.bias[units]) @ down.weight[:, units].T
    return z + down.bias if rank == 0 else z


def _floor_split(x, up, down, rank, world):
    k = up.out_features // world  # drops the last units when they do not divide
    rows = slice(rank * k, (rank + 1) * k)
    z = F.gelu(x @ up.weight[rows].T + up.bias[rows]) @ down.weight[:, rows].T
    return z + down.bias if rank == 0 else z


def _array_split(x, up, down, rank, world):
    rows = torch.arange(up.out_features).tensor_split(world)[rank]  # 3, 3, 2, 2 instead of torch.chunk's 3, 3, 3, 1
    z = F.gelu(x @ up.weight[rows].T + up.bias[rows]) @ down.weight[:, rows].T
    return z + down.bias if rank == 0 else z


def _rank_zero_does_all(x, up, down, rank, world):
    return down(F.gelu(up(x))) if rank == 0 else torch.zeros(x.shape[0], down.out_features)


def _mismatched(x, up, down, rank, world):
    other = (rank + 1) % world
    z = _hidden(x, up, rank, world) @ down.weight[:, _units(up.out_features, other, world)].T
    return z + down.bias if rank == 0 else z


def _wrong_dim(x, up, down, rank, world):
    return F.gelu(x @ up.weight.chunk(world, 1)[rank].T) @ down.weight.chunk(world, 0)[rank].T


@pytest.mark.parametrize("fn", [_right, _bias_shared, _bias_last])
def test_the_check_accepts_right_answers(fn):
    verdict = check_megatron_mlp(fn)
    assert verdict.ok, verdict


@pytest.mark.parametrize("fn,hint", [
    (None, "define partial_output"),
    (lambda x, up, down, rank, world: None, "must return a tensor"),
    (lambda x, up, down, rank, world: 1 / 0, "ZeroDivisionError"),
    (lambda x, up, down, rank, world: torch.zeros(3), "returned shape"),
    (_bias_everywhere, "once per rank"),
    (_no_bias, "lacks down.bias"),
    (_whole, "every rank computed the whole MLP"),
    (_no_gelu, "GELU is missing"),
    (_floor_split, "would divide"),
    (_array_split, "its own piece"),
    (_rank_zero_does_all, "its own piece"),
    (_mismatched, "the same columns r"),
    (_wrong_dim, "raised"),
    (_chunk_index, "into only 3 pieces for 4 ranks"),
])
def test_the_check_says_what_is_wrong(fn, hint):
    verdict = check_megatron_mlp(fn)
    assert not verdict.ok and hint in str(verdict), verdict


def test_the_check_gives_each_call_fresh_layers_and_keeps_the_random_state():
    def spoils_layers_after(x, up, down, rank, world):
        out = _right(x, up, down, rank, world)
        with torch.no_grad():
            up.weight.zero_()  # only this call's copy: the next rank still gets the real layers
        return out

    assert check_megatron_mlp(spoils_layers_after).ok
    torch.manual_seed(0)
    check_megatron_mlp(_right)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))  # the check's own random numbers come from a forked generator


def test_the_check_never_shows_a_right_result():
    verdict = str(check_megatron_mlp(_no_bias))
    assert "tensor(" not in verdict and "[" not in verdict


# ---- the questions --------------------------------------------------------------------------------------


def test_three_questions_each_option_explained():
    assert len(QUESTIONS_12) == 3
    for q in QUESTIONS_12:
        for letter, option in zip(q.letters, q.options):
            verdict = q.check(letter)
            assert verdict.ok == (letter == q.answer) and str(verdict).endswith(option.why)


@pytest.mark.parametrize("answer,ok,hint", [(402.65, True, "402.7"), ("402.7", True, ""),
                                            (201.3, False, "one all-reduce"), (536.9, False, "tokens x hidden"),
                                            (805.3, False, "backward"),
                                            (268.4, False, "size of the two"), (134.2, False, "ring's factor"),
                                            ("many", False, "answer with a number"), (1.0, False, "tokens x hidden")])
def test_the_bytes_question(answer, ok, hint):
    verdict = QUESTIONS_12[1].check(answer)
    assert verdict.ok is ok and hint in str(verdict), verdict


def _two_orders(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The notebook's demonstration: 4 ranks' partial sums of a row-parallel layer, added one after another
    (as a ring does) and in pairs (as a tree does). Element-wise additions round the same on every machine."""
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(64, 256, generator=g, dtype=dtype), torch.randn(256, 256, generator=g, dtype=dtype)
    z = [xr @ wr.T for xr, wr in zip(x.chunk(4, dim=1), w.chunk(4, dim=1))]
    return ((z[0] + z[1]) + z[2]) + z[3], (z[0] + z[1]) + (z[2] + z[3])


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / a.abs().max()).item()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rounding_is_the_size_of_the_tp_difference(seed):
    """The two orders an all-reduce may use differ, by the size of rounding, and far less in float64."""
    one_by_one, in_pairs = _two_orders(torch.float32, seed)
    assert not torch.equal(one_by_one, in_pairs)  # the order of the additions shows in the last bits
    gap32 = _gap(one_by_one, in_pairs)
    assert 0 < gap32 < 4 * torch.finfo(torch.float32).eps
    assert 0 < _gap(*_two_orders(torch.float64, seed)) < 1e-6 * gap32


def test_the_vocabulary_question_quotes_the_right_sizes():
    q = QUESTIONS_12[2]
    assert "50,258" in q.prompt and padded_vocab(50257, 2) == 50258
    sizes = shard_sizes(50257, 2)
    assert all(f"{n:,}" in q.options[2].why for n in sizes)  # what DTensor would hold on each rank
    assert q.answer == "b" and "masked or cut off" in q.options[1].text


def test_the_check_has_a_case_where_torch_chunk_returns_fewer_pieces_than_ranks():
    from gpulab.exercises.tensor_parallel import CASES

    short = [(ffn, world) for _, ffn, world, _ in CASES if len(torch.arange(ffn).chunk(world)) < world]
    assert (5, 4) in short and shard_sizes(5, 4) == [2, 2, 1, 0]  # rank 3 holds no unit, as under DTensor's Shard
    verdict = check_megatron_mlp(_chunk_index)
    assert not verdict.ok and "rank=3, world=4" in str(verdict) and "IndexError" in str(verdict)


def test_the_check_names_the_arguments_it_needs():
    verdict = check_megatron_mlp(lambda x, up, down, rank: x)
    assert not verdict.ok and "five arguments" in str(verdict) and "(x, up, down, rank)" in str(verdict)
    assert check_megatron_mlp(lambda *args: _right(*args)).ok


def test_the_answer_key_finds_every_answer():
    from gpulab.course.answer_key import solve

    assert all(q.check(solve(q)).ok for q in QUESTIONS_12)
