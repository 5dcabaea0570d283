"""gpulab.measured_elsewhere: every figure measured elsewhere says what, on what, with what, and links its source."""

from __future__ import annotations

import pytest

from gpulab import measured_elsewhere as published


@pytest.mark.parametrize("figure", published.FIGURES, ids=lambda f: f"{f.hardware} {f.what}"[:60])
def test_every_figure_is_fully_attributed(figure):
    assert figure.source.startswith("https://") and figure.value > 0
    assert figure.hardware and figure.software and figure.unit and figure.what
    if figure.spec is not None:
        assert 0 < figure.share_of_spec <= 1.0  # a measurement never beats the spec sheet's peak here


def test_the_table_is_labelled_and_cites_every_source():
    text = published.table("collective")
    assert text.startswith("Measured elsewhere, not by this course")
    assert all(f.source in text for f in published.figures("collective"))


def test_an_unknown_topic_is_refused():
    with pytest.raises(ValueError, match="unknown topic 'fft'"):
        published.figures("fft")


@pytest.mark.parametrize("run", published.RUNS, ids=lambda r: r.name)
def test_every_run_is_attributed_and_its_degrees_use_every_gpu(run):
    assert run.source.startswith("https://arxiv.org/abs/") and run.note and run.gpu
    assert run.tp * run.pp * run.dp == run.gpus  # context and expert parallelism live inside dp here
    assert run.gpus % run.gpus_per_node == 0 and run.tp <= run.gpus_per_node  # tensor parallelism inside a node
    assert run.batch % run.dp == 0 and run.links[0] > run.links[1]  # NVLink faster than the network


def test_the_runs_table_names_each_layout_and_source():
    text = published.runs_table()
    assert text.startswith("Published elsewhere, not measured by this course")
    assert all(r.name in text and r.source in text for r in published.RUNS)
    assert "DualPipe" in text and "ZeRO-1" in text and "not given" in text  # DeepSeek-V3 gives no MFU


def test_what_the_planner_picks_for_the_published_runs():
    from gpulab.planner import published_runs as plan_published

    verdicts = {run.name: plan_published.verdict(run) for run in published.RUNS}
    llama, deepseek, megatron = (verdicts[n] for n in ("Llama 3 405B", "DeepSeek-V3", "Megatron-LM 1T"))
    for v in (llama, megatron):  # dense: the planner keeps TP 8 inside a node; the papers' layouts fit
        assert v["pick tp"] == 8 and v["published fits"] and 0 < v["published MFU"] < 1
        assert v["pick s"] <= v["published s"] and v["ranked before"] < v["fit"]
    assert not deepseek["published fits"]  # every expert on every rank: expert parallelism is what makes it fit
    assert deepseek["published"].startswith("ZeRO-1 128 x PP 16")
    layout = plan_published.published_layout(published.RUNS[0])
    assert (layout.dp, layout.tp, layout.pp, layout.fsdp) == (128, 8, 16, True) and layout.stages_per_rank == 2
    model = plan_published.model_of(published.RUNS[1])
    assert model.active_parameters == 37e9 and model.vocab == 129280
    assert plan_published.model_flops(model, 1) == pytest.approx((6 * 37e9 + 6 * 4096 * 7168 * 61) * 4096)
