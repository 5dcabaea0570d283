"""Notebook 09, collectives and their cost: ``driver`` launches the rank program ``worker`` (what each collective
does and costs); ``ddp_profile`` is DDP's all-reduces under the profiler.
"""
