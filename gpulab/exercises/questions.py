"""Every notebook's self-check questions, by notebook: each topic module keeps its own beside its checks.

Values are computed by the questions' grade functions, never typed in (a matmul's operation count from its
shapes, DataParallel's split from ``gpulab.data_parallel``, the sampler's padding from ``DistributedSampler``).
``gpulab.exercises.quiz`` shows them as widgets; ``gpulab.course.answer_key`` writes the teacher's key.

A notebook loads only its own topic module: :data:`QUESTIONS` imports ``WHERE[nb]`` the first time notebook
``nb``'s questions are asked for (notebook 01 never imports the tensor-parallel checks).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from gpulab.exercises import Question

#: notebook -> (the module of gpulab.exercises that holds its questions, the name of the tuple there)
WHERE: dict[str, tuple[str, str]] = {
    "01": ("devices", "QUESTIONS_01"),
    "02": ("devices", "QUESTIONS_02"),
    "03": ("single_device", "QUESTIONS_03"),
    "04": ("data_parallel", "QUESTIONS_04"),
    "05": ("ddp", "QUESTIONS_05"),
    "06": ("boston", "QUESTIONS_06"),
    "07": ("precision", "QUESTIONS_07"),
    "08": ("sharding", "QUESTIONS_08"),
    "09": ("collectives", "QUESTIONS_09"),
    "10": ("failures", "QUESTIONS_10"),
    "11": ("roofline", "QUESTIONS_11"),
    "12": ("tensor_parallel", "QUESTIONS_12"),
    "13": ("pipelines", "QUESTIONS_13"),
    "14": ("kernels", "QUESTIONS_14"),
    "15": ("context_and_experts", "QUESTIONS_15"),
}


class _ByNotebook(Mapping):
    """``QUESTIONS["04"]``: notebook 04's questions, its module imported on first use."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Question, ...]] = {}

    def __getitem__(self, notebook: str) -> tuple[Question, ...]:
        if notebook not in self._loaded:
            module, name = WHERE[notebook]  # KeyError for an unknown notebook, as a dict
            self._loaded[notebook] = getattr(importlib.import_module(f"gpulab.exercises.{module}"), name)
        return self._loaded[notebook]

    def __setitem__(self, notebook: str, found: tuple[Question, ...]) -> None:  # tests replace one notebook's
        self._loaded[notebook] = found

    def __delitem__(self, notebook: str) -> None:
        self._loaded.pop(notebook, None)

    def __iter__(self) -> Iterator[str]:
        return iter(WHERE)

    def __len__(self) -> int:
        return len(WHERE)


QUESTIONS: Mapping[str, tuple[Question, ...]] = _ByNotebook()
