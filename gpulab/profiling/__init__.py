"""Notebook 11, profiling and torch.compile: a training step under ``torch.profiler`` (``steps``), the roofline
(``roofline``) with a CPU's theoretical peak (``cpu_peak``) and operations' FLOPs and bytes (``op_count``),
what compiling costs and gains (``compile_timing``) and the code inductor wrote (``compiled_code``).
"""
