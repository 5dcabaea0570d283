"""Everything that runs several processes: the torchrun launcher, the rank programs, their drivers.

A rank program is a ``NAME_worker.py`` module that torchrun starts once per rank (its place from
``rank_io.rank_env``, its group joined through ``rank_io.run_in_group``); its driver ``NAME.py`` launches it
through ``torchrun`` and reads what the ranks wrote. The pairs: ``ddp`` / ``ddp_worker`` (DDP on the
article's recipe; ``checkpoint``: its epoch checkpoints), ``fsdp`` / ``fsdp_worker`` (FSDP2 on CPU ranks;
``fsdp_probe``: one step's memory measured), ``collectives`` / ``collectives_worker`` (what each collective
does and costs; ``ddp_profile``: DDP's all-reduces under the profiler; ``cost``: busbw, the alpha + beta fit,
DDP's buckets), ``failures`` / ``failures_worker`` (notebook 10's failures on purpose; ``failures_ddp``: its
DDP cases), ``crossover`` / ``crossover_worker`` (where more DDP ranks stop helping), ``tensor_parallel`` /
``tensor_parallel_worker`` (notebook 12; ``tp_parts``, ``tp_traffic``: its parts) and ``pipelines`` /
``pipelines_worker`` (notebook 13; ``pipelines_probe``, ``pipelines_schedules``, ``pipelines_mesh``,
``pipelines_calibrate``, ``pipelines_layouts``, ``pipelines_plan``: its parts).

The launcher's parts: ``torchrun_command`` and ``torchrun`` (building and running the command, with a time
limit), ``launch_result`` (results and errors), ``processes`` (the process tree, stopping it, reading its
output on every OS), ``rendezvous`` (what each OS needs for a single-machine rendezvous) and ``rank_io``
(a rank's place, whole output lines and a clean exit). ``rendezvous_check`` is the pre-class check's real
two-rank rendezvous, without torchrun.
"""
