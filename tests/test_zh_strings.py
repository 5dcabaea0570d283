"""The Chinese edition's feedback lines and plot texts: the catalogues follow the code, and the swap works.

``scripts/zh_strings.py`` lists every English template the exercise checks and the plots can show;
``gpulab/exercises/feedback_zh.json`` and ``gpulab/figures/plots_zh.json`` must hold Chinese for each, with the
same fields, and nothing else. :mod:`gpulab.translation` renders a built message back through its template.
"""

from __future__ import annotations

import ast
import json
import re
import warnings

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from gpulab import translation
from gpulab.exercises import Feedback, correct, devices, in_chinese, wrong
from gpulab.figures import chinese as figures_zh
from scripts_loader import load_script

ZH = load_script("zh_strings")
CJK = re.compile(r"[\u4e00-\u9fff]")
CATALOGUES = {"feedback": (ZH.FEEDBACK, ZH.feedback_templates), "plots": (ZH.PLOTS, ZH.plot_templates)}


@pytest.mark.parametrize("name", sorted(CATALOGUES))
def test_every_template_has_chinese_and_every_entry_a_template(name):
    path, templates = CATALOGUES[name]
    missing, unused = ZH.out_of_step(path, templates())
    assert not missing, "no Chinese (run `python scripts/zh_strings.py --todo F`): " + "; ".join(
        f"{text!r} at {', '.join(places)}" for text, places in list(missing.items())[:5])
    assert not unused, f"{path.name} translates English the code no longer writes: {unused[:5]}"


@pytest.mark.parametrize("name", sorted(CATALOGUES))
def test_each_translation_keeps_the_fields_and_is_chinese(name):
    table = json.loads(CATALOGUES[name][0].read_text(encoding="utf-8"))
    for english, chinese in table.items():
        translation.Template(english, chinese)  # raises when the fields differ
        assert CJK.search(chinese) or not re.search(r"[a-z]", translation.literal(english)), (english, chinese)


def test_a_changed_english_message_is_reported_with_its_place():
    source = (ZH.ROOT / "gpulab" / "exercises" / "devices.py").read_text(encoding="utf-8")
    planted = source.replace("answer with a number, got", "answer with a count, got")
    assert planted != source
    found = ZH.strings(ast.parse(planted), "gpulab/exercises/devices.py", phrases=True)
    table = json.loads(ZH.FEEDBACK.read_text(encoding="utf-8"))
    stale = {text: places for text, places in found.items() if text not in table}
    assert list(stale) == ["answer with a count, got {answer!r}"]
    assert stale["answer with a count, got {answer!r}"][0].startswith("gpulab/exercises/devices.py:")


def test_templates_are_read_as_the_code_writes_them():
    tree = ast.parse('wrong(f"{n} ranks, got {answer!r} ({x:.3g} s) {{literal}}" + hint)\n'
                     'ax.set_title("one training step", loc="left"); ax.plot(x, y, "o-")\n'
                     'raise ValueError("not shown: a programming error")\n')
    assert set(ZH.strings(tree, "t.py")) == {"{n} ranks, got {answer!r} ({x:.3g} s) {{literal}}{hint}",
                                             "one training step", "left"}  # a setting: read where no plot is
    assert set(ZH.strings(tree, "t.py", plot=True)) == {"{n} ranks, got {answer!r} ({x:.3g} s) {{literal}}{hint}",
                                                        "one training step"}


def test_a_message_is_rendered_through_its_template_and_its_phrases_too():
    catalogue = translation.Catalogue({
        "{where}: expected {want.type}, got {got.type}": "{where}：应为 {want.type}，得到的是 {got.type}",
        "prefer={prefer!r} on a machine with {have}": "在有 {have} 的机器上，prefer={prefer!r}",
        "only the cpu": "只有 CPU",
        "{n} of {n} right, {x:.1f} s": "{n} 个全对，{x:.1f} 秒",
        "use {{'A': 1}}, got {answer!r}": "请用 {{'A': 1}}，得到的是 {answer!r}",
    })
    assert catalogue.translate("prefer='cuda' on a machine with only the cpu: expected cpu, got cuda") == \
        "在有 只有 CPU 的机器上，prefer='cuda'：应为 cpu，得到的是 cuda"
    assert catalogue.translate("3 of 3 right, 0.5 s") == "3 个全对，0.5 秒"
    assert catalogue.translate("3 of 4 right, 0.5 s") == "3 of 4 right, 0.5 s"  # {n} twice must be one value
    assert catalogue.translate("use {'A': 1}, got 'x'") == "请用 {'A': 1}，得到的是 'x'"
    assert catalogue.translate("a message nobody wrote") == "a message nobody wrote"
    with pytest.raises(ValueError, match="fields"):
        translation.Template("expected {want}, got {got}", "应为 {want}")


def test_feedback_speaks_the_kernels_edition(monkeypatch):
    feedback = devices.check_device_picker(lambda prefer, cuda, mps, xpu: None)
    assert str(feedback).startswith("Not yet: prefer='auto' on a machine with only the cpu: your function returned")
    monkeypatch.setenv(translation.ENV, "zh")
    shown = str(feedback)
    assert shown.startswith("还不对：") and CJK.search(shown[4:]) and "only the cpu" not in shown
    assert "torch.device('cpu')" in shown  # code stays code
    assert str(Feedback(False, "answer with a number, got 'x'", "en")).startswith("Not yet: answer")


@pytest.mark.parametrize("feedback", [
    devices.check_device_picker(lambda prefer, cuda, mps, xpu: torch.device("cuda")),
    devices.check_device_picker(lambda prefer, cuda, mps, xpu: 1 / 0),
    devices.check_matmul_flops(lambda n: n ** 3),
    devices.check_matmul_flops(lambda n: 2 * n ** 3),
    wrong("answer with a number, got 'x'"),
], ids=["wrong device", "raises", "multiplications only", "right", "value question"])
def test_checks_feedback_is_all_chinese(feedback, monkeypatch):
    monkeypatch.setenv(translation.ENV, "zh")
    message = in_chinese(feedback.message)
    assert message != feedback.message and CJK.search(message)
    left = re.sub(r"'[^']*'|\w+\(.*?\)|[A-Za-z_]+Error：.*|n=\d+", "", message)  # values, code, the learner's error
    assert not figures_zh.needs_translation(left), message


def test_plot_texts_are_swapped_when_drawn(monkeypatch, recwarn):
    monkeypatch.setitem(matplotlib.rcParams, "figure.hooks", [])
    monkeypatch.setitem(matplotlib.rcParams, "font.family", list(matplotlib.rcParams["font.family"]))
    assert figures_zh.use_chinese_plots(font="DejaVu Sans")  # a font every matplotlib has: no font needed here
    assert matplotlib.rcParams["figure.hooks"] == [figures_zh.HOOK]
    fig, ax = plt.subplots()
    ax.set_title("Loss per step")
    ax.set_yticks([0, 1], labels=["forward", "rank 0"])
    ax.set_xlabel("a label nobody wrote")
    fig.canvas.draw()
    assert CJK.search(ax.get_title()) and ax.get_xlabel() == "a label nobody wrote"
    assert CJK.search(ax.get_yticklabels()[0].get_text()) and ax.get_yticklabels()[1].get_text() == "rank 0"
    plt.close(fig)


def test_a_label_put_together_from_data_is_translated_by_its_parts():
    catalogue = figures_zh.plot_catalogue()
    shown = figures_zh.piecewise(catalogue, "this CPU, 2 threads\ncopy within its memory, pinned, 64 MiB")
    assert shown == "本机 CPU，2 个线程\n在自身内存内复制，锁页内存，64 MiB"
    assert figures_zh.piecewise(catalogue, "D: peak of the step").startswith("D：") and CJK.search(
        figures_zh.piecewise(catalogue, "D: peak of the step"))
    assert figures_zh.piecewise(catalogue, "NVIDIA H200, nothing we wrote") == "NVIDIA H200, nothing we wrote"


def test_plots_from_a_run_are_all_chinese():
    from gpulab.figures.ddp import batch_shards, crash_timeline

    for fig in (batch_shards({2: [[3, 3], [3, 1]], 3: [[2, 2, 2], [2, 2, 1]]}, detail=3),
                crash_timeline(6, 3, 2, ["epoch0002.pt"], history=[0, 1, 2, 2, 3, 4, 5])):
        left = figures_zh.translate_plot(fig)
        assert not left, left
        assert CJK.search(fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title())
        plt.close(fig)


def test_the_chinese_font_is_named_in_the_family_where_matplotlib_falls_back(monkeypatch):
    """matplotlib falls back glyph by glyph along font.family's named fonts only (not along font.sans-serif)."""
    monkeypatch.setitem(matplotlib.rcParams, "figure.hooks", [])
    monkeypatch.setitem(matplotlib.rcParams, "font.family", list(matplotlib.rcParams["font.family"]))
    font = figures_zh.chinese_font()
    figures_zh.use_chinese_plots(font=font or "DejaVu Sans")
    assert matplotlib.rcParams["font.family"] == ["DejaVu Sans", font or "DejaVu Sans"]
    if font is None:
        pytest.skip("no Chinese font on this machine: the drawing itself is checked where there is one")
    fig, ax = plt.subplots()
    ax.set_title("每一步的损失 (loss)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font(s)" would be an empty box
        fig.canvas.draw()
    plt.close(fig)


def test_a_chinese_font_is_found_by_name_or_a_line_says_which_to_install(monkeypatch, capsys):
    assert figures_zh.chinese_font(["DejaVu Sans", "Microsoft YaHei", "Noto Sans CJK SC"]) == "Noto Sans CJK SC"
    assert figures_zh.chinese_font(["DejaVu Sans"]) is None
    monkeypatch.setattr(figures_zh, "chinese_font", lambda installed=None: None)
    assert figures_zh.use_chinese_plots() is False
    assert "Noto Sans CJK SC" in capsys.readouterr().out


def test_the_verdict_words_follow_the_edition(monkeypatch):
    assert str(correct("fine")) == "Correct: fine"
    monkeypatch.setenv(translation.ENV, "zh")
    assert str(correct("a message nobody wrote")) == "正确：a message nobody wrote"


@pytest.mark.parametrize("path", sorted((ZH.ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb")),
                         ids=lambda p: p.name[:2])
def test_the_zh_notebooks_saved_feedback_is_chinese(path):
    lines = [line for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
             for out in cell.get("outputs", []) for text in (out.get("text", []), out.get("data", {}).get("text/plain", []))
             for line in "".join(text).splitlines()]
    assert not [line for line in lines if re.match(r"(Correct|Not yet): ", line)], "run `python scripts/build_zh.py`"
    assert all(CJK.search(line.split("：", 1)[1]) for line in lines if line.startswith(("正确：", "还不对：")))
