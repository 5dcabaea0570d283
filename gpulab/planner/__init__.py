"""Notebook 13's planner, ``gpulab plan``: which ways to split training over GPUs fit, and how fast each is.

``plan`` (predict every layout, rank them), ``layouts`` (which splits apply), ``blocks`` (what one layer saves and
sends), ``costs`` (FLOPs, compute rate, memory), ``traffic`` (every collective and send of a step),
``calibration`` and ``validation`` (measure a machine for the planner, test its ranking) and ``published_runs``
(what large published runs chose, and where the planner ranks them).
"""
