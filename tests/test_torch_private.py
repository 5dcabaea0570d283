"""Every private torch name gpulab uses is still there in the torch the course pins (gpulab.torch_private).

If one of these fails after a torch upgrade, the function named in the failure is the only place to fix.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab import torch_private as tp


def test_memory_categories_name_the_timeline_columns():
    names = tp.memory_categories()
    assert {"parameter", "gradient", "activation", "optimizer state"} <= set(names)


def test_a_profile_has_a_start_time_and_an_event_tree_with_allocations():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.ones(1000) * 2
    assert tp.trace_start_us(prof) > 1e15  # microseconds since 1970
    tags = {node.tag for node in tp.event_tree(prof)}
    assert tp.allocation_tag() in tags


def test_ddp_bucket_defaults_are_found():
    cap, first, where = tp.ddp_default_bucket_caps()
    assert (cap, first) == (25.0, 1.0) and ("_DEFAULT_BUCKET_CAP_MB" in where or "__init__" in where)
    assert tp.ddp_explicit_cap_sets_first_bucket() is True  # torch 2.11 and 2.13 alike


def test_ddp_bucket_rules_read_from_the_source_of_an_older_ddp(monkeypatch):
    from torch.nn.parallel import distributed

    monkeypatch.delattr(distributed, "_DEFAULT_BUCKET_CAP_MB", raising=False)
    older = "        if bucket_cap_mb is None:\n            bucket_cap_mb = 25\n  [dist._DEFAULT_FIRST_BUCKET_BYTES, cap]\n"
    monkeypatch.setattr(tp, "_ddp_source", lambda: older)
    assert tp.ddp_default_bucket_caps() == (25.0, 1.0, "bucket_cap_mb in DistributedDataParallel.__init__")
    assert tp.ddp_explicit_cap_sets_first_bucket() is False  # every bucket list starts with 1 MiB
    monkeypatch.setattr(tp, "_ddp_source", lambda: older + "self.bucket_bytes_cap_default = True\n")
    assert tp.ddp_explicit_cap_sets_first_bucket() is True
    monkeypatch.setattr(tp, "_ddp_source", lambda: "")
    assert tp.ddp_default_bucket_caps() is None and tp.ddp_explicit_cap_sets_first_bucket() is None


def test_fsdp_averages_float32_gradients():
    before, after, op = tp.fsdp_gradient_divide_factors(8, torch.float32)
    assert (before, after) == (None, None) and "AVG" in str(op)
    before, after, op = tp.fsdp_gradient_divide_factors(8, torch.float16)
    assert "SUM" in str(op) and before * after == 8


def test_compile_and_optimizer_internals_answer():
    assert tp.cpu_vector_isa() is not None
    assert tp.adam_default_foreach([nn.Parameter(torch.ones(2))]) is not None
    assert callable(tp.dynamo_explain(lambda x: x + 1))


def test_the_warmup_without_self_sends_keeps_every_op_to_another_rank(monkeypatch):
    from types import SimpleNamespace

    import torch.distributed as dist
    from torch.distributed.pipelining.stage import _PipelineStageBase

    assert hasattr(_PipelineStageBase, "_get_init_p2p_neighbors_ops")  # the name the mixin overrides still exists
    ops = [SimpleNamespace(peer=p) for p in (0, 1, 1, 2)]

    class Base:
        def _get_init_p2p_neighbors_ops(self):
            return ops

    class Stage(tp.NoSelfSendWarmup, Base):
        pass

    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    assert [op.peer for op in Stage()._get_init_p2p_neighbors_ops()] == [0, 2]


def test_compile_caches_can_be_turned_off_on_this_torch_and_on_one_without_the_public_switch(monkeypatch):
    import torch._inductor.config as inductor

    before = inductor.force_disable_caches
    with tp.compile_caches_off(True):
        assert inductor.force_disable_caches is True
    assert inductor.force_disable_caches == before
    monkeypatch.delattr(torch.compiler, "config", raising=False)  # torch 2.6 has no torch.compiler.config
    with tp.compile_caches_off(True):
        assert inductor.force_disable_caches is True
    assert inductor.force_disable_caches == before


def test_a_missing_name_says_what_to_use_instead():
    with pytest.raises(tp.PrivateAPIMissing, match=r"has no torch\.nn\.no_such_name: do this instead"):
        tp._private("torch.nn", "no_such_name", "do this instead")
    assert tp.ddp_rebuilt_bucket_sizes(object()) is None  # a fallback where the caller has one
    assert tp.trace_start_us(object()) is None
