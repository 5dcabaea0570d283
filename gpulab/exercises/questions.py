"""Every notebook's self-check questions, by notebook: each topic module keeps its own beside its checks.

Values are computed by the questions' grade functions, never typed in (a matmul's operation count from its
shapes, DataParallel's split from ``gpulab.parallel``, the sampler's padding from ``DistributedSampler``).
``gpulab.exercises.quiz`` shows them as widgets; ``gpulab.exercises.answer_key`` writes the teacher's key.
"""

from __future__ import annotations

from gpulab.exercises import (Question, boston, collectives, data_parallel, ddp, devices, failures, pipelines,
                              precision, roofline, sharding, single_device, tensor_parallel)

QUESTIONS: dict[str, tuple[Question, ...]] = {
    "01": devices.QUESTIONS_01,
    "02": devices.QUESTIONS_02,
    "03": single_device.QUESTIONS_03,
    "04": data_parallel.QUESTIONS_04,
    "05": ddp.QUESTIONS_05,
    "06": boston.QUESTIONS_06,
    "07": precision.QUESTIONS_07,
    "08": sharding.QUESTIONS_08,
    "09": collectives.QUESTIONS_09,
    "10": failures.QUESTIONS_10,
    "11": roofline.QUESTIONS_11,
    "12": tensor_parallel.QUESTIONS_12,
    "13": pipelines.QUESTIONS_13,
}
