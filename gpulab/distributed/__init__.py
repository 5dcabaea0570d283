"""Everything that runs several processes: the torchrun launcher, the rank programs and their checkpoints.

``gpulab.distributed.launch`` is the entry point (``launch``, ``train_ddp``); the other modules are its
parts: ``processes`` (the process tree, stopping it, reading its output on every OS), ``rendezvous``
(what each OS needs for a single-machine rendezvous), ``torchrun_command`` and ``torchrun`` (building and
running the command), ``launch_result`` (results and errors), ``rank_io`` (a worker's output and exit),
``ddp_worker`` (the DDP rank program), ``fsdp_worker``, ``fsdp_probe`` and ``fsdp`` (FSDP2 on CPU ranks: the
rank program, one step's memory measured, ``train_fsdp``), ``collectives_worker``, ``ddp_profile`` and ``collectives`` (what each collective does and
costs, DDP's all-reduces under the profiler: the rank program, its DDP part and ``run_collectives``), ``cost``
(busbw, the alpha + beta fit, DDP's buckets), ``failures_worker``, ``failures_ddp`` and ``failures`` (notebook
10's failures, reproduced on purpose: the rank program, its DDP cases and ``reproduce``), ``checkpoint`` (epoch
checkpoints) and ``loopback`` (the pre-class rendezvous check).
"""
