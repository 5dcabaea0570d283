"""Everything that runs several processes: one folder per lesson's rank programs, and the launcher.

A lesson with ranks has a folder here: ``worker.py`` is its rank program, which torchrun starts once per rank
(its place, group and exit through ``launch.rank_io``), and ``driver.py`` launches it with
``launch.collect.run_ranks`` and reads what the ranks wrote; the other modules of the folder are the worker's
parts. The folders: ``ddp`` (notebook 05), ``crossover`` (07), ``fsdp`` (08), ``collectives`` (09),
``failures`` (10), ``tensor_parallel`` (12) and ``pipelines`` (13). ``launch`` starts and stops them.
"""
