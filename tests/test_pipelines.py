"""Notebook 13's launch: pipeline schedules and a 2-D mesh equal one process (with controls that differ), the
activations in flight, the traces, fewer micro-batches than stages, the layouts against gpulab.planner.plan, no orphans.
Also the pieces that need no launch: live activation bytes, the ideal timelines, the exercise and its questions."""

from __future__ import annotations

import warnings

import psutil
import pytest
import torch

from gpulab import torch_versions
from gpulab.distributed.pipelines import driver as pipelines
from gpulab.distributed.pipelines import plan as pipelines_plan
from gpulab.distributed.pipelines.layouts import CALIBRATION, LAYOUTS, VALIDATION
from gpulab.distributed.pipelines.probe import SHAPE, SavedBytes, batch, blocks, mse
from gpulab.exercises.pipelines import QUESTIONS_13, check_in_flight
from gpulab.figures import has_title
from gpulab.figures import pipelines as pictures

LAYERS = SHAPE["layers"]


@pytest.fixture(scope="module")
def launched():
    """One launch of every part (fewer repeats than the notebook), and the processes it left behind."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lesson = pipelines.run_lesson(timeout=300, repeats=2, steps=1)
    after = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
    return lesson, after


@pytest.fixture(scope="module")
def lesson(launched):
    return launched[0]


@pytest.mark.slow
def test_the_launch_leaves_nothing_behind(launched):
    assert launched[1] == []


@pytest.mark.slow
def test_every_schedule_equals_one_process_and_the_control_differs(lesson):
    rows = pipelines.grad_rows(lesson)
    runs, control = rows[:-1], rows[-1]
    assert len(runs) == 7 + 5  # GPipe at 4 counts, 1F1B at 3, five looped schedules (DualPipeV among them)
    assert all(r["max |difference|"] <= 1e-6 for r in runs), runs
    assert control["run"].startswith("control") and control["max |difference|"] > 1e-4


@pytest.mark.slow
def test_activations_in_flight_gpipe_all_1f1b_at_most_the_stages(lesson):
    for row in pipelines.in_flight_rows(lesson):
        m, rank = row["micro-batches"], row["rank"]
        want = m if row["schedule"] == "GPipe" else min(m, 2 - rank)
        assert row["micro-batches in flight"] == pytest.approx(want, abs=1e-9), row
    gpipe = {r["micro_batches"]: r["peak_saved"] for r in lesson.report["schedules"]["runs"] if r["schedule"] == "GPipe"}
    assert len({tuple(v) for v in gpipe.values()}) == 1  # GPipe keeps the whole batch, whatever the count


@pytest.mark.slow
def test_traces_show_each_schedules_order(lesson):
    gpipe, one = pipelines.timeline(lesson, "GPipe"), pipelines.timeline(lesson, "1F1B")
    assert [pipelines.order(r) for r in gpipe] == ["F0 F1 F2 F3 B0 B1 B2 B3"] * 2
    assert [pipelines.order(r) for r in one] == ["F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"]
    looped = pipelines.timeline(lesson, "Interleaved1F1B")
    assert [sorted({b["stage"] for b in r}) for r in looped] == [[0, 2], [1, 3]]
    for rank in gpipe + one + looped:
        assert all(b["end_ms"] >= b["start_ms"] >= 0 for b in rank)
    with pytest.raises(ValueError, match="no trace"):
        pipelines.timeline(lesson, "ScheduleNone")


@pytest.mark.slow
def test_bubbles_are_shares_with_their_spread_and_the_replay(lesson):
    rows = pipelines.bubble_rows(lesson)
    assert {(r["schedule"], r["micro-batches"]) for r in rows} == {
        ("GPipe", 1), ("GPipe", 2), ("GPipe", 4), ("GPipe", 8), ("1F1B", 2), ("1F1B", 4), ("1F1B", 8)}
    assert all(0 <= r["q25"] <= r["measured (median)"] <= r["q75"] < 1 and r["steps"] == 2 for r in rows)
    assert all(r["formula"] == pipelines.bubble_formula(2, r["micro-batches"]) for r in rows)
    # the replay keeps the measured compute and drops the messages: never below the formula's ideal by much
    assert all(r["formula"] - 0.05 <= r["replayed (median)"] < 1 for r in rows), rows


TORCH_2_13 = pytest.mark.skipif(torch_versions.release(torch.__version__) < torch_versions.release("2.13"),
                                reason="pins torch 2.13's messages: before 2.13 the last stage does not refuse a batch "
                                       "too small for its micro-batches (pytorch/pytorch#180937), and 2.11 still checks "
                                       "the first stage's input shapes (PipeliningShapeError)")


@pytest.mark.slow
@TORCH_2_13
def test_fewer_micro_batches_than_stages_and_too_small_batches_are_refused_on_every_rank(lesson):
    said = {case["case"]: case["per_rank"] for case in lesson.report["schedules"]["refused"]}
    one, dual, rounds, small = said.values()
    assert all(s.startswith("ValueError:") and "greater than or equal to the number of stages (2)" in s for s in one)
    assert all("DualPipeV requires at least as many microbatches as stages" in s for s in dual)
    assert all("multiple of the number of rounds (2), but got 5" in s for s in rounds)
    assert small == ["ValueError: Expecting 4 arg_mbs but got 3",
                     "AssertionError: Tensor size 3 is smaller than num_chunks"]


@pytest.mark.slow
@TORCH_2_13
def test_a_batch_that_does_not_divide_fails_on_the_last_stage_and_times_out_the_first(lesson):
    odd = lesson.report["schedules"]["uneven"]
    assert odd["chunks"] == [3, 3, 2, 2]
    first, last = odd["per_rank"]
    assert "Timed out" in first and not first.startswith("RuntimeError: [")  # no build path in the message
    assert "size of tensor a (3) must match the size of tensor b (2)" in last


@pytest.mark.slow
def test_the_2d_mesh_equals_one_process_and_its_collectives_run_where_expected(lesson):
    mesh = lesson.report["mesh"]
    assert mesh["grad_error"] <= 1e-6 and mesh["control"]["grad_error"] > 1e-4
    assert [r["groups"] for r in mesh["per_rank"]] == [
        {"dp": [0, 2], "tp": [0, 1]}, {"dp": [1, 3], "tp": [0, 1]}, {"dp": [0, 2], "tp": [2, 3]},
        {"dp": [1, 3], "tp": [2, 3]}]
    assert all(pipelines.mesh_checks(lesson).values())
    calls = {r["collective"]: r["calls"] for r in pipelines.mesh_rows(lesson)}
    # FSDP gathers each block before its forward and again before its backward; TP's last all-reduce is missing
    # in backward because the first block's input needs no gradient
    assert calls == {"all-gather": 2 * LAYERS, "reduce-scatter": LAYERS, "all-reduce": 2 * LAYERS - 1}


@pytest.mark.slow
def test_layouts_measured_against_the_plan(lesson):
    assert set(lesson.report["layouts"]) == set(LAYOUTS)
    memory = pipelines_plan.memory_rows(lesson)
    assert len(memory) == len(LAYOUTS) and all(abs(r["measured / predicted"] - 1) < 0.1 for r in memory), memory
    peaks = {r["layout"]: r["predicted peak MiB"] > r["predicted MiB"] for r in memory}  # the unmeasured extras
    assert peaks["TP 4"] is False and peaks["DDP 4"] and peaks["FSDP 4"] and peaks["FSDP 2 x TP 2"], peaks
    calls = pipelines_plan.calls_rows(lesson)  # the planner's list of calls is the profiler's
    assert {r["layout"] for r in calls} == set(CALIBRATION)
    assert all(r["planned"] == r["profiled"] for r in calls), calls
    machine = pipelines_plan.cluster(lesson)
    assert machine.gpus == 4 and machine.calibration is not None and 0 < machine.calibration.alone <= 1
    assert set(machine.calibration.collectives) == {(k, n) for k in ("all_reduce", "all_gather", "reduce_scatter")
                                                    for n in (2, 4)} | {("send", 2)}
    assert set(machine.calibration.exposed) == {("ddp", 4), ("fsdp", 4), ("tp", 4), ("pp", 2), ("tp", 2), ("ddp", 2),
                                                ("fsdp", 2)}  # one each, from the calibration layouts in order
    fitted = pipelines_plan.calibration_check(lesson)["rows"]  # each calibration layout fits its own share
    assert all(r["measured / predicted"] == pytest.approx(1, abs=0.02) for r in fitted), fitted
    verdict = pipelines_plan.ranking(lesson)
    assert [r["layout"] for r in verdict["rows"]] == list(VALIDATION) and len(VALIDATION) >= 6
    assert -1 <= verdict["spearman"] <= 1 and set(verdict["met"]) == {"layouts", "spearman", "factor"}
    assert all(r["measured ms"] > 0 and r["predicted ms"] > 0 for r in verdict["rows"])


@pytest.mark.slow
def test_run_data_figures_have_titles(lesson):
    import matplotlib

    matplotlib.use("Agg")
    traced = {name: pipelines.timeline(lesson, name) for name in ("GPipe", "1F1B", "Interleaved1F1B")}
    for fig in (pictures.timelines(traced), pictures.bubble_plot(pipelines.bubble_rows(lesson)),
                pictures.in_flight_plot(pipelines.in_flight_rows(lesson)),
                pictures.ranking_plot(pipelines_plan.calibration_check(lesson)["rows"],
                                      pipelines_plan.ranking(lesson)["rows"])):
        assert has_title(fig)


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="parts"):
        pipelines.run_lesson(parts=("nope",))
    with pytest.raises(ValueError, match="stages"):
        pipelines.bubble_formula(0, 4)
    with pytest.raises(ValueError, match="cuda"):  # the GPU harness runs the planner's parts only
        pipelines.run_lesson(parts=("calibrate", "schedules"), device="cuda")
    with pytest.raises(ValueError, match="device='tpu'"):
        pipelines.run_lesson(device="tpu")


def _spans(timeline) -> list[list[list]]:
    """An ideal timeline (figures.pipelines.ideal_timeline) as a step's per-rank [name, start, end] ranges."""
    return [[[f"stage {s} {b['kind']}{b['micro_batch']}", b["start_ms"], b["end_ms"]] for b in boxes]
            for s, boxes in enumerate(timeline)]


@pytest.mark.parametrize("schedule, p, m", [("GPipe", 2, 1), ("GPipe", 2, 8), ("1F1B", 2, 4), ("1F1B", 4, 8),
                                            ("GPipe", 4, 6)])
def test_the_replay_of_an_ideal_step_has_the_formulas_bubble(schedule, p, m):
    ideal = _spans(pictures.ideal_timeline(schedule, p, m))
    assert pipelines.replayed_bubble(ideal) == pytest.approx(pipelines.bubble_formula(p, m))
    late = [[[n, a + 5.0 * (s == 1), b + 5.0 * (s == 1)] for n, a, b in rank] for s, rank in enumerate(ideal)]
    assert pipelines.replayed_bubble(late) == pytest.approx(pipelines.bubble_formula(p, m))  # waits removed


def test_the_replay_keeps_unequal_compute_and_refuses_what_is_not_a_step():
    # GPipe, 2 micro-batches, stage 1's forwards 3 units long: the replay keeps that, the formula does not know it;
    # the measured start times play no part (here every range starts late)
    ranges = [[("F0", 1), ("F1", 1), ("B0", 2), ("B1", 2)], [("F0", 3), ("F1", 3), ("B0", 2), ("B1", 2)]]
    step = [[[f"stage {s} {op}", 100.0 + i, 100.0 + i + length] for i, (op, length) in enumerate(rank)]
            for s, rank in enumerate(ranges)]
    # rank 1: F0 1-4, F1 4-7, B0 7-9, B1 9-11; rank 0: F0 0-1, F1 1-2, B0 9-11, B1 11-13
    assert pipelines.replayed_bubble(step) == pytest.approx(1 - (6 + 10) / 2 / 13)
    assert pipelines.replayed_bubble(step) > pipelines.bubble_formula(2, 2)
    stuck = [[["stage 0 B0", 0, 1], ["stage 0 F0", 1, 2]], [["stage 1 F0", 0, 1], ["stage 1 B0", 1, 2]]]
    with pytest.raises(ValueError, match="wait for each other"):
        pipelines.replayed_bubble(stuck)


def test_saved_bytes_counts_live_activations_once_and_frees_them():
    model = blocks(layers=2, hidden=8)
    x, y = batch(samples=4, sequence=2, hidden=8)
    tracker = SavedBytes()
    with tracker.watch(model):
        loss = mse(model(x), y)
    rows, h = len(x), 8
    # per block: the Linear's input (h) and the ReLU's output (4h, saved once though the next Linear saves it too);
    # the loss saves output - target (h)
    assert tracker.now == tracker.peak == 4 * rows * (2 * (h + 4 * h) + h)
    loss.backward()
    assert tracker.now == 0
    with tracker.watch(model):
        mse(model(x[:2]), y[:2]).backward()
    assert tracker.peak == 4 * rows * (2 * (h + 4 * h) + h)  # reset_peak() was not called: the peak stays


@pytest.mark.parametrize("p, m", [(2, 1), (2, 8), (4, 4), (4, 6), (8, 16)])
def test_ideal_timelines_have_the_formulas_bubble_and_torchs_warm_up(p, m):
    for schedule in ("GPipe", "1F1B"):
        if schedule == "1F1B" and m < p:
            continue
        timeline = pictures.ideal_timeline(schedule, p, m)
        end = max(b["end_ms"] for rank in timeline for b in rank)
        work = sum(b["end_ms"] - b["start_ms"] for rank in timeline for b in rank)
        assert 1 - work / (p * end) == pytest.approx(pipelines.bubble_formula(p, m))
        for stage, boxes in enumerate(timeline):
            alive = peak = 0
            for b in boxes:
                alive += 1 if b["kind"] == "F" else -1
                peak = max(peak, alive)
            assert peak == (m if schedule == "GPipe" else min(m, p - stage))
    with pytest.raises(ValueError):
        pictures.ideal_timeline("Zero", 2, 2)


def _right(schedule, stages, micro_batches, stage):
    return micro_batches if schedule == "GPipe" else min(micro_batches, stages - stage)


@pytest.mark.parametrize("fn, hint", [
    (lambda s, p, m, st: m, "GPipe's"),
    (lambda s, p, m, st: m if s == "GPipe" else p, "same on every stage"),
    (lambda s, p, m, st: m if s == "GPipe" else st + 1, "grow along the pipeline"),
    (lambda s, p, m, st: m if s == "GPipe" else p - st - 1, "draw the 1F1B timeline"),
    (lambda s, p, m, st: 1 if s == "GPipe" else min(m, p - st), "every forward before the first backward"),
    (lambda s, p, m, st: None, "whole number"),
    (lambda s, p, m, st: float("nan"), "whole number"),
    (lambda s, p, m, st: float("inf"), "whole number"),
    (lambda s, p, m, st: [m, p], "whole number"),
    (lambda s, p, m, st: "many", "whole number"),
    (lambda s, p: p, "TypeError"),
    (lambda s, p, m, st: 1 / 0, "ZeroDivisionError"),
    ("in_flight", "pass your function"),
])
def test_check_in_flight_names_each_mistake_without_the_answer(fn, hint):
    verdict = check_in_flight(fn)
    assert not verdict.ok and hint in verdict.message, verdict.message
    assert "min(" not in verdict.message and "p - stage" not in verdict.message


def test_check_in_flight_accepts_the_rule():
    assert check_in_flight(_right).ok
    assert check_in_flight(lambda s, p, m, st: float(_right(s, p, m, st))).ok


def test_check_in_flight_says_exactly_what_it_tried():
    from gpulab.exercises.pipelines import UNSEEN, _cases

    message, cases = check_in_flight(_right).message, _cases()
    stages = sorted({p for p, _ in UNSEEN})
    assert f"all {len(cases)} cases tried" in message and "3 to 8 stages" not in message
    assert ", ".join(map(str, stages[:-1])) + f" and {stages[-1]} stages" in message


@pytest.mark.parametrize("answer, ok, hint", [
    ("0.2", True, ""), ("1/5", True, ""), ("20%", True, ""), (0.2, True, ""), (20, True, ""),
    (0.25, False, "over the compute"), (4 / 16, False, "over the compute"), (3 / 16, False, "slots again"),
    ("half", False, "a number"), (0.5, False, "formula"), (float("nan"), False, "a number"), ([0.2], False, "a number"),
    (-0.2, False, "between 0 and 1"), ("", False, "a number"),
])
def test_question_1_the_bubble_share(answer, ok, hint):
    verdict = QUESTIONS_13[0].check(answer)
    assert verdict.ok == ok and hint in verdict.message, verdict.message


def test_questions_13_choices():
    assert len(QUESTIONS_13) == 3
    assert QUESTIONS_13[1].check("a").ok and not QUESTIONS_13[1].check("b").ok
    assert QUESTIONS_13[2].check("b").ok and not QUESTIONS_13[2].check("c").ok
    for q in QUESTIONS_13[1:]:
        whys = [o.why for o in q.options]
        assert len(set(whys)) == len(whys)


def test_why_the_zero_bubble_schedules_need_2d_batches_holds_for_this_torch():
    """Notebook 13 (and pipelines_probe.batch): on 3-D inputs a Linear returns a view, and the zero-bubble
    schedules' input backward detaches the stage output in place, which a view refuses. Checked here step by
    step in one process; a 2-rank ScheduleInterleavedZeroBubble run fails with exactly this cause."""
    import inspect

    from torch import nn
    from torch.distributed.pipelining import _backward

    assert "t.detach_()" in inspect.getsource(_backward.stage_backward_input)
    layer = nn.Linear(8, 8)
    flat, tokens = layer(torch.randn(6, 8, requires_grad=True)), layer(torch.randn(2, 3, 8, requires_grad=True))
    assert not flat._is_view() and tokens._is_view()
    flat.detach_()
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        tokens.detach_()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 4, reason="the planner's harness on nccl needs 4 GPUs, one a rank")
def test_the_planners_calibration_and_validation_run_on_four_gpus():
    """The same two parts on nccl, one GPU a rank: the calibration, the shares, the verdict and the bytes held."""
    on_gpus = pipelines.run_lesson(timeout=600, parts=("calibrate", "layouts"), steps=3, device="cuda")
    machine = pipelines_plan.cluster(on_gpus)
    assert machine.calibration.alone == pytest.approx(1, abs=0.2)  # each rank has its own GPU
    verdict = pipelines_plan.ranking(on_gpus)
    assert len(verdict["rows"]) == len(VALIDATION) and all(r["measured ms"] > 0 for r in verdict["rows"])
    assert all(r["planned"] == r["profiled"] for r in pipelines_plan.calls_rows(on_gpus))
    assert all(abs(r["measured / predicted"] - 1) < 0.1 for r in pipelines_plan.memory_rows(on_gpus))
