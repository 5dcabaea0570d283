"""Notebook 13, pipelines and layouts: ``driver`` launches the rank program ``worker`` once for the lesson and reads
what it measured; the worker's parts are ``probe`` (labelled stages, saved bytes), ``schedules``, ``mesh`` (a 2-D
mesh), ``layouts``, ``calibrate`` (the machine measured for the planner) and ``plan`` (the planner against the
runs).
"""
