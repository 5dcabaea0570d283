"""The schematics in Chinese, for the Chinese edition: each is drawn as in English, then its texts are swapped.

``zh_texts.json`` beside this module maps an English label, exactly as drawn (line breaks included), to its
Chinese text. A label with no English word in it (numbers, code such as ``all_reduce``, names such as
``rank 0`` or ``GPU``) stays as it is. :func:`translate` swaps the texts of a drawn figure and returns the
English labels that have no translation, so ``scripts/make_figures.py`` refuses to write a half-translated
picture. The text stays text in the SVG (``svg.fonttype`` ``none``), so the learner's own fonts draw the
Chinese.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

TEXTS = Path(__file__).with_name("zh_texts.json")
#: words that stay in Latin letters in the Chinese edition (names of devices, libraries, parallelisms, units)
NAMES = frozenset("""
rank ranks gpu gpus cpu cpus ddp fsdp fsdp2 zero tp pp cp ep dp sp mlp nccl gloo pcie nvlink hbm sram sm dma
cuda mps xpu rocm python torch pytorch torchrun tcpstore triton aten adam sgd relu gelu softmax lse nvidia h200 h100 a100 t4
gb mb kb gib mib kib tb ms us ns s flop flops gflop tflop pflop gbps ram vram api id ids qkv bf16 fp16 fp32
float16 float32 bfloat16 float64 int8 tf32 ok os gpipe 1f1b zb zbv dualpipe dualpipev megatron llama deepseek
infiniband ib nic dram l1 l2 dtensor moe kv gqa x y
""".split())
WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")


@functools.cache
def table() -> dict[str, str]:
    """English label -> Chinese label."""
    return json.loads(TEXTS.read_text(encoding="utf-8"))


def needs_translation(text: str) -> bool:
    """True when ``text`` has an English word that is not a name kept in Latin letters or part of code."""
    for token in re.split(r"\s+", text):
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
