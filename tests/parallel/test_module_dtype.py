"""AMP as the sharded engines run it: FSDP2's MixedPrecisionPolicy(param_dtype=bf16), DeepSpeed bf16 and
Megatron-LM hold the model itself in 16 bits, so the residual stream, norms and every checkpointed block input
are bf16; DDP with torch.autocast keeps them fp32. The planner takes each engine's activations from the trace
of its own program (parallel/profile.py ``module_dtype_step``; one predicate, ``fp32_weights_with_autocast``).
"""

from __future__ import annotations

import pytest
from tests.fixtures.tiny_models import TINY_LLAMA

from gpuplan.hardware import get_gpu
from gpuplan.models.sources import HFConfigSource
from gpuplan.parallel.evaluate import evaluate
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Zero
from gpuplan.parallel.plan import plan_context
from gpuplan.parallel.profile import profile_from_step, profile_model
from gpuplan.parallel.topology import make_topology
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload

BATCH, SEQ = 2, 32
HIDDEN = TINY_LLAMA["hidden_size"]


def _workload(checkpointing: str) -> Workload:
    return Workload(mode="train", batch_size=BATCH, seq_len=SEQ, precision="amp-bf16", checkpointing=checkpointing)


def test_sharded_engines_hold_16_bit_activations() -> None:
    gpu = get_gpu("H100-SXM")
    src = HFConfigSource("tiny-llama", TINY_LLAMA)
    p = profile_model(src, _workload("full"), gpu)
    autocast, modules = p.activations(False), p.activations(True)
    # full checkpointing keeps each block's input: fp32 under autocast (the residual stream), bf16 when the
    # modules are bf16 (tokens × hidden × 2 bytes): the 80-layer halving the 72B verl row showed
    assert autocast.block_bytes == BATCH * SEQ * HIDDEN * 4
    assert modules.block_bytes == BATCH * SEQ * HIDDEN * 2
    ctx = plan_context(p, make_topology(gpu, 2), gpu)
    for sharding, a in ((DDP(), autocast), (FSDP2(), modules), (Zero(3), modules), (Zero(1), modules),
                        (MegatronDDP(), modules)):
        lay = Layout(dp=2, tp=1, pp=1, micro_batch_size=BATCH, grad_accum=1, sharding=sharding, checkpointing="full")
        (rank,) = evaluate(ctx, lay).ranks
        assert rank.activations_bytes == int(a.block_bytes * p.layers + a.first_bytes + a.last_bytes
                                             + a.transient_bytes), sharding
        # the same predicate drops autocast's weight copies
        assert (rank.weight_cast_bytes > 0) == isinstance(sharding, DDP)


@pytest.mark.parametrize("checkpointing", ["none", "full"])
@pytest.mark.slow
def test_16_bit_module_activations_match_a_real_cpu_run(checkpointing: str) -> None:
    # the fake trace of the bf16 model against the same step run for real on the CPU, split by the same profile
    # code (host semantics on both sides, as tests/trace/test_exact_accounting.py): exact, storage by storage
    gpu = get_gpu("H100-SXM")
    src = HFConfigSource("tiny-llama", TINY_LLAMA)
    w = _workload(checkpointing)
    half = w.with_(precision=w.module_dtype_precision)
    amp_fake = trace_step(src, w, cuda=False)
    real = profile_from_step(amp_fake, src, w, gpu, module_dtype_step=trace_step(src, half, cuda=False, fake=False))
    fake = profile_from_step(amp_fake, src, w, gpu, module_dtype_step=trace_step(src, half, cuda=False))
    assert real.module_dtype_activations == fake.module_dtype_activations
    assert fake.module_dtype_activations != fake.activations(False)


def test_the_16_bit_module_trace_waits_for_a_layout_that_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # the second trace costs as much as the first: a profile evaluated on DDP layouts only (torch AMP keeps fp32
    # weights, so it reads the autocast trace) never runs it; the first sharded layout runs it once
    import gpuplan.parallel.profile as profile

    calls: list[Workload] = []
    real = profile.module_dtype_step

    def counted(source: HFConfigSource, workload: Workload, cc: tuple[int, int]) -> object:
        calls.append(workload)
        return real(source, workload, cc)

    monkeypatch.setattr(profile, "module_dtype_step", counted)
    gpu = get_gpu("H100-SXM")
    p = profile_model(HFConfigSource("tiny-llama", TINY_LLAMA), _workload("full"), gpu)
    ctx = plan_context(p, make_topology(gpu, 2), gpu)

    def layout(sharding: DDP | FSDP2) -> Layout:
        return Layout(dp=2, tp=1, pp=1, micro_batch_size=BATCH, grad_accum=1, sharding=sharding,
                      checkpointing="full")

    evaluate(ctx, layout(DDP()))
    assert calls == []
    evaluate(ctx, layout(FSDP2()))
    evaluate(ctx, layout(FSDP2()))
    assert len(calls) == 1
    assert p.activations(True).block_bytes == BATCH * SEQ * HIDDEN * 2
