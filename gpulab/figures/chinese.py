"""The figures in Chinese, for the Chinese edition: each is drawn as in English, then its texts are swapped.

``zh_texts.json`` beside this module maps an English label, exactly as drawn (line breaks included), to its
Chinese text. A label with no English word in it (numbers, code such as ``all_reduce``, names such as
``rank 0`` or ``GPU``) stays as it is. :func:`translate` swaps the texts of a drawn figure and returns the
English labels that have no translation, so ``scripts/make_figures.py`` refuses to write a half-translated
picture. The text stays text in the SVG (``svg.fonttype`` ``none``), so the learner's own fonts draw the
Chinese.

Plots drawn from a run's data are swapped as they are drawn: in a kernel of the Chinese edition
(:func:`gpulab.translation.language`), :func:`use_chinese_plots` (called when gpulab is imported) puts a Chinese
font in matplotlib's list and a hook on every new figure that renders each text from ``plots_zh.json`` (English
templates, kept in step with the code by ``scripts/zh_strings.py``) or ``zh_texts.json`` just before it is drawn.
Without a Chinese font, plots keep their English labels (a learner reads them rather than empty boxes) and one
line says which font to install.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from gpulab.translation import Catalogue, catalogue as merged_catalogue

TEXTS = Path(__file__).with_name("zh_texts.json")
PLOTS = Path(__file__).with_name("plots_zh.json")
HOOK = "gpulab.figures.chinese:on_new_figure"
PLOT_LOG = "GPULAB_PLOT_LOG"  # a file: each drawn figure's texts and those left English, one JSON line each
#: fonts with Chinese glyphs, tried in this order (Linux, Windows, macOS)
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei",
             "Droid Sans Fallback", "Microsoft YaHei", "SimHei", "DengXian", "PingFang SC", "Hiragino Sans GB",
             "Heiti SC", "STHeiti", "Arial Unicode MS")
#: file names of those fonts (lower case, without - _ and spaces), for fonts installed after matplotlib's cache
CJK_FILE = re.compile(r"wqy|notosanscjk|notosanssc|sourcehansans|droidsansfallback|msyh|simhei|deng|pingfang|"
                      r"hiragino|stheiti|arialuni")
NO_FONT = ("中文版：matplotlib 找不到中文字体，图中的文字保持英文。安装一种中文字体（例如 Noto Sans CJK SC，"
           "Debian/Ubuntu 上是 fonts-noto-cjk）后重启内核。")
#: words that stay in Latin letters in the Chinese edition (names of devices, libraries, parallelisms, units)
NAMES = frozenset("""
rank ranks gpu gpus cpu cpus ddp fsdp fsdp2 zero tp pp cp ep dp sp mlp nccl gloo pcie nvlink hbm sram sm dma
cuda mps xpu rocm python torch pytorch torchrun tcpstore triton aten adam sgd relu gelu softmax lse nvidia h200 h100 a100 t4
gb mb kb gib mib kib tb ms us ns s flop flops gflop tflop pflop gbps ram vram api id ids qkv bf16 fp16 fp32
float16 float32 bfloat16 float64 int8 tf32 ok os gpipe 1f1b zb zbv dualpipe dualpipev megatron llama deepseek
infiniband ib nic dram l1 l2 dtensor moe kv gqa x y
""".split())
WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
CJK = re.compile(r"[\u4e00-\u9fff]")


@functools.cache
def table() -> dict[str, str]:
    """English label -> Chinese label."""
    return json.loads(TEXTS.read_text(encoding="utf-8"))


def needs_translation(text: str) -> bool:
    """True when ``text`` has an English word that is not a name kept in Latin letters or part of code."""
    for token in re.split(r"\s+", text):
        token = token.rstrip(":,;.!?")  # a word at the end of a clause is still a word
        if any(c in token for c in "_`=()[]{}:.") and not token.strip("()").isalpha():
            continue  # code: all_reduce, `x.to(device)`, schedule(wait=1, ...), cuda:0
        for word in WORD.findall(token):
            if len(word) > 1 and word.lower() not in NAMES and not any(c.isdigit() for c in word):
                return True
    return False


def translate(fig) -> list[str]:
    """Swap every text of ``fig`` for its Chinese; the English labels that have none (and need one)."""
    import matplotlib.text

    missing = []
    for artist in fig.findobj(matplotlib.text.Text):
        text = artist.get_text()
        if text in table():
            artist.set_text(table()[text])
        elif text.strip() and needs_translation(text):
            missing.append(text)
    return missing


def plot_catalogue() -> Catalogue:
    """The schematics' labels and the plots' templates, in one catalogue."""
    return merged_catalogue(TEXTS, PLOTS)


def piecewise(catalogue: Catalogue, text: str) -> str:
    """``text`` in Chinese: whole when a template fits, else line by line, else by its ", "-separated parts.

    A plot's label is often put together from a run's data ("this CPU, 2 threads" on one line, "copy within its
    memory, pinned, 64 MiB" on the next); its parts are in the catalogue even when the whole is not.
    """
    found = catalogue.translate(text)
    if found != text:
        return found
    if "\n" in text:
        return "\n".join(piecewise(catalogue, line) for line in text.split("\n"))
    numbered = re.match(r"(\d+\. )(.+)", text, re.S)  # "1. all-gather": a step's number, then its label
    if numbered:
        rest = piecewise(catalogue, numbered.group(2))
        return text if rest == numbered.group(2) else numbered.group(1) + rest
    for separator, chinese in ((", ", "，"), ("; ", "；"), (": ", "：")):
        parts = text.split(separator, 1 if separator == ": " else -1)  # "A: start", a label and its name
        if len(parts) > 1:
            done = [piecewise(catalogue, part) for part in parts]
            if done != parts:
                return chinese.join(done)
    return text


def translate_plot(fig) -> list[str]:
    """Render every text of ``fig`` in Chinese (tick labels given as text too); the English texts left as they were."""
    import matplotlib.category
    import matplotlib.text
    import matplotlib.ticker

    catalogue, left = plot_catalogue(), []

    def swap(text: str) -> str:
        if not text.strip() or not needs_translation(text):
            return text
        found = piecewise(catalogue, text)
        if found == text and not CJK.search(text) and text not in catalogue.exact:  # not a name kept on purpose
            left.append(text)
        return found

    text_formatters = (matplotlib.ticker.FixedFormatter, matplotlib.ticker.FuncFormatter,
                       matplotlib.category.StrCategoryFormatter)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):  # tick labels given as text are made again at each draw: swap at source
            formatter = axis.get_major_formatter()
            if isinstance(formatter, text_formatters) and not getattr(formatter, "in_chinese", False):
                wrapped = matplotlib.ticker.FuncFormatter(
                    lambda x, pos=None, english=formatter: catalogue.translate(str(english(x, pos))))
                wrapped.in_chinese = True
                axis.set_major_formatter(wrapped)
    for artist in fig.findobj(matplotlib.text.Text):
        text = artist.get_text()
        found = swap(text)
        if found != text:
            artist.set_text(found)
    return left


def chinese_font(installed: list[str] | None = None) -> str | None:
    """The first of :data:`CJK_FONTS` matplotlib can use (``installed``: font names, else matplotlib's list)."""
    if installed is None:
        from matplotlib import font_manager

        installed = [f.name for f in font_manager.fontManager.ttflist]
        if not set(installed) & set(CJK_FONTS):  # matplotlib lists the fonts it found when its cache was made
            for path in font_manager.findSystemFonts():
                if CJK_FILE.search(re.sub(r"[-_ ]", "", Path(path).name.lower())):
                    try:
                        font_manager.fontManager.addfont(path)
                    except (OSError, RuntimeError, ValueError):
                        continue  # a file FreeType cannot read: try the next
            installed = [f.name for f in font_manager.fontManager.ttflist]
    have = set(installed)
    return next((font for font in CJK_FONTS if font in have), None)


def on_new_figure(fig) -> None:
    """matplotlib's ``figure.hooks`` entry: render the figure's texts in Chinese each time it is drawn."""
    import matplotlib.text

    original = fig.draw

    def draw(renderer):
        left = translate_plot(fig)
        log = os.environ.get(PLOT_LOG)
        if log:  # scripts/check_zh_run.py: which texts of a real run stayed English
            with open(log, "a", encoding="utf-8") as out:
                titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [
                    t for ax in fig.axes for t in (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())]
                out.write(json.dumps({"titles": [t for t in titles if t], "left": left}, ensure_ascii=False) + "\n")
        return original(renderer)

    fig.draw = draw


def use_chinese_plots(font: str | None = None) -> bool:
    """Draw every new figure in Chinese: a Chinese font after DejaVu Sans, and :func:`on_new_figure` as a hook.

    ``font``: the font to use (default: :func:`chinese_font`). False, after printing one line, when there is none.
    """
    import matplotlib

    font = font or chinese_font()
    if font is None:
        print(NO_FONT)
        return False
    # matplotlib falls back glyph by glyph along font.family's named fonts, not along the sans-serif list:
    # Latin from DejaVu Sans as in English, Chinese from the font found
    matplotlib.rcParams["font.family"] = ["DejaVu Sans", font]
    if HOOK not in matplotlib.rcParams["figure.hooks"]:
        matplotlib.rcParams["figure.hooks"] = [*matplotlib.rcParams["figure.hooks"], HOOK]
    return True
