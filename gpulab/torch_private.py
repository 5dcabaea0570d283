"""THE one place gpulab reaches into torch's private names: each behind one small guarded function.

Private names (a leading underscore, or a module under ``torch._...``) may change in any release.
Every use lives here, so a new torch breaks one function, not a notebook: a function either says
what is missing in one line (:class:`PrivateAPIMissing`) or returns None where its caller has a
fallback. ``tests/test_torch_private.py`` checks that each one still finds its name in the torch
the course pins, and fails loudly the day one is gone.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterator

import torch


class PrivateAPIMissing(RuntimeError):
    """This torch no longer has a private name gpulab used; the message names it and the way around it."""


def _private(module: str, name: str, instead: str) -> Any:
    """``module.name``, or PrivateAPIMissing saying what to use ``instead``."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise PrivateAPIMissing(f"torch {torch.__version__} has no {module}.{name}: {instead}") from None


# ----------------------------------------------------------------------------- profiler


def memory_categories() -> list[str]:
    """The column names of ``export_memory_timeline``'s JSON, in order (``"parameter"``, ``"gradient"`` ...)."""
    order = _private("torch.profiler._memory_profiler", "_CATEGORY_TO_INDEX",
                     "read the timeline as an HTML plot (export_memory_timeline with a .html path)")
    return ["unknown" if c is None else c.name.lower().replace("_", " ") for c in order]


def trace_start_us(prof) -> float | None:
    """When a profile's trace starts, in microseconds since the epoch (one clock for every rank); None if unknown."""
    try:
        return prof.profiler.kineto_results.trace_start_ns() / 1e3
    except AttributeError:
        return None


def event_tree(prof) -> Iterator:
    """Every node of a finished profile's event tree (allocations included), depth first."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None or not hasattr(results, "experimental_event_tree"):
        raise PrivateAPIMissing(f"torch {torch.__version__} has no profiler event tree "
                                "(kineto_results.experimental_event_tree): use export_memory_timeline instead")
    stack = list(results.experimental_event_tree())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


def allocation_tag():
    """The tag of an allocation node in :func:`event_tree` (``torch._C._profiler._EventType.Allocation``)."""
    return _private("torch._C._profiler", "_EventType", "use export_memory_timeline instead").Allocation


# ----------------------------------------------------------------------------- DDP and FSDP


def ddp_rebuilt_bucket_sizes(ddp) -> list[int] | None:
    """The bytes of each bucket DDP uses after rebuilding its buckets (its logging data); None if absent."""
    try:
        text = ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
    except Exception:  # a private API: absent or changed
        return None
    return [int(t) for t in str(text).split(",") if t.strip()] or None


def _ddp_source() -> str:
    """The source of ``torch.nn.parallel.distributed`` ("" where it cannot be read)."""
    import inspect

    try:
        return inspect.getsource(importlib.import_module("torch.nn.parallel.distributed"))
    except (ImportError, OSError, TypeError):
        return ""


def ddp_default_bucket_caps() -> tuple[float, float, str] | None:
    """DDP's default ``(bucket cap, first bucket cap)`` in MiB, read from torch, and where the cap was read.

    torch 2.13 names the cap ``_DEFAULT_BUCKET_CAP_MB``; earlier releases (2.11) write ``bucket_cap_mb = 25`` in
    ``DistributedDataParallel.__init__``, which is read instead. None where neither can be read.
    """
    import re

    try:
        first = _private("torch.distributed", "_DEFAULT_FIRST_BUCKET_BYTES", "") / 2**20
    except PrivateAPIMissing:
        return None
    try:
        cap = float(_private("torch.nn.parallel.distributed", "_DEFAULT_BUCKET_CAP_MB", ""))
        return cap, first, "torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB"
    except PrivateAPIMissing:
        pass
    literal = re.search(r"^\s*bucket_cap_mb\s*=\s*(\d+(?:\.\d+)?)\s*$", _ddp_source(), re.M)
    if literal is None:
        return None
    return float(literal.group(1)), first, "bucket_cap_mb in DistributedDataParallel.__init__"


def ddp_explicit_cap_sets_first_bucket() -> bool | None:
    """Whether this torch's DDP gives a ``bucket_cap_mb`` you pass to its first bucket too; None if unreadable.

    Read from DDP's source: torch 2.13 (``_BucketCapacityConfig``) and 2.11 (``bucket_bytes_cap_default``) keep
    the small first bucket for the default cap only; a torch that always puts ``_DEFAULT_FIRST_BUCKET_BYTES``
    first has neither name.
    """
    source = _ddp_source()
    if "_BucketCapacityConfig" in source or "bucket_bytes_cap_default" in source:
        return True
    return False if "_DEFAULT_FIRST_BUCKET_BYTES" in source else None


def fsdp_gradient_divide_factors(world_size: int, dtype: torch.dtype) -> tuple:
    """``(divide before, divide after, reduce op)`` FSDP2 uses for a gradient of ``dtype`` over ``world_size`` ranks."""
    factors = _private("torch.distributed.fsdp._fully_shard._fsdp_collectives", "_get_gradient_divide_factors",
                       "read fully_shard's docs on reduce_dtype instead")

    class Group:  # stands in for a process group: the function only asks for its size
        def size(self) -> int:
            return world_size

    before, after, op, *_ = factors(Group(), None, dtype)
    return before, after, op


# ----------------------------------------------------------------------------- torch.compile and optimizers


def run_and_get_code(fn: Callable[[], object]) -> tuple[object, list[str]]:
    """``(fn(), the Python modules inductor wrote while fn ran)``; TorchDynamo is reset first."""
    run = _private("torch._inductor.utils", "run_and_get_code", "read the code with TORCH_LOGS=output_code")
    return run(fn)


def dynamo_explain(fn: Callable):
    """``torch._dynamo.explain(fn)``: call the result with the arguments to get graphs and graph breaks."""
    return _private("torch._dynamo", "explain", "see graph breaks with TORCH_LOGS=graph_breaks")(fn)


def cpu_vector_isa() -> str | None:
    """Run inductor's once-per-machine check of the CPU's vector instructions; their name, or None if absent."""
    try:
        pick = _private("torch._inductor.cpu_vec_isa", "pick_vec_isa", "")
    except PrivateAPIMissing:
        return None
    return str(pick())


def adam_default_foreach(params) -> bool | None:
    """Whether ``torch.optim.Adam`` picks its ``foreach`` implementation for ``params`` by default; None if unknown."""
    try:
        choose = _private("torch.optim.optimizer", "_default_to_fused_or_foreach", "")
    except PrivateAPIMissing:
        return None
    _, foreach = choose(list(params), differentiable=False, use_fused=False)
    return bool(foreach)


def has_cuda_memory_tool(name: str) -> bool:
    """Whether ``torch.cuda.memory`` has the (underscored) snapshot tool ``name``, e.g. ``_dump_snapshot``."""
    return hasattr(torch.cuda.memory, name)


def compile_caches_off(off: bool = True):
    """A context in which inductor's on-disk caches are off (``off=False``: as they are).

    ``torch.compiler.config.force_disable_caches`` (public, newer torch) or, where this torch lacks it (2.6),
    ``torch._inductor.config.force_disable_caches``, the setting it forwards to.
    """
    import torch.compiler

    config = getattr(torch.compiler, "config", None)
    if config is not None and hasattr(config, "force_disable_caches"):
        return config.patch(force_disable_caches=bool(off))
    return _private("torch._inductor", "config", "upgrade torch").patch(force_disable_caches=bool(off))


# ----------------------------------------------------------------------------- pipelining


class NoSelfSendWarmup:
    """Mix into a ``PipelineStage`` subclass: torch 2.9 to 2.11's first-step warm-up without sends to oneself.

    Before its first step, a pipeline schedule of torch 2.9 to 2.11 sends a number to each neighbouring stage and
    receives one from it (``_get_init_p2p_neighbors_ops``, pytorch/pytorch#160210), to the stage on this same rank
    too where a V-shaped schedule (ZBVZeroBubble, DualPipeV) puts two neighbours on one rank. gloo has no
    connection from a rank to itself ("Pair is not connected"), so those are left out. torch 2.12 and later do
    not call the method for a ``PipelineStage``.
    """

    def _get_init_p2p_neighbors_ops(self) -> list:
        import torch.distributed as dist

        return [op for op in super()._get_init_p2p_neighbors_ops() if op.peer != dist.get_rank()]
