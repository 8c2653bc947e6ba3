"""torchtitan's op-level selective activation checkpointing (``--checkpointing selective-op``).

Source of the policy: pytorch/torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` @
004b3148a92b565ef0ce7a7bcc61e0159c7ec930 (``_save_list``, ``_custom_policy``): outputs of ``aten.mm``,
the flash / memory-efficient SDPA kernels and ``_c10d_functional.reduce_scatter_tensor`` are saved,
except every second ``aten.mm`` of a checkpointed call (counted apart in the forward and in the
recompute); every other op is recomputed.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.fixtures.tiny_models import TINY_LLAMA


def test_policy_saves_odd_matmuls_and_attention_outputs() -> None:
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    from gpuplan.trace.runner import torchtitan_op_policy

    aten = torch.ops.aten
    flash = aten._scaled_dot_product_flash_attention.default
    # one Llama block's forward: q, k, v projections, attention, o, then gate, up, down
    block = [aten.mm.default] * 3 + [aten.mul.Tensor, flash] + [aten.mm.default] * 4 + [aten.silu.default]
    policy = torchtitan_op_policy()
    fwd = SimpleNamespace(is_recompute=False)
    rec = SimpleNamespace(is_recompute=True)
    decisions = [policy(fwd, f) == CheckpointPolicy.MUST_SAVE for f in block]
    # mm #1 (q) saved, #2 (k) recomputed, #3 (v) saved; mul recomputed; flash saved; #4 (o)
    # recomputed, #5 (gate) saved, #6 (up) recomputed, #7 (down) saved; silu recomputed
    assert decisions == [True, False, True, False, True, False, True, False, True, False]
    # the recompute counts its own matmuls from 1: the same ones are saved again
    assert [policy(rec, f) == CheckpointPolicy.MUST_SAVE for f in block] == decisions
    # a fresh policy per checkpointed call (torchtitan makes one counter per call)
    assert torchtitan_op_policy()(fwd, aten.mm.default) == CheckpointPolicy.MUST_SAVE


@pytest.mark.slow
def test_real_cpu_run_holds_exactly_what_the_trace_counts(tmp_path: Path) -> None:
    """Storage by storage: the step run for real on the CPU (gpuplan.measure's program, same
    checkpoint policy) reaches the peak the fake-tensor host trace computes, and op-level SAC saves
    less than saving every matmul (half the Llama block's projections are recomputed)."""
    import torch

    from gpuplan.estimate import make_workload
    from gpuplan.measure.program import build_program
    from gpuplan.models.sources import resolve_model
    from gpuplan.trace.step import trace_step

    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": 2}))
    source = resolve_model(str(tmp_path / "config.json"))
    acts = {}
    for mode in ("selective", "selective-op", "full"):
        w = make_workload(mode="train", batch_size=2, seq_len=32, checkpointing=mode)
        program = build_program(source, w, torch.device("cpu"))
        program.run_step()
        real = program.record_step()
        fake = trace_step(source, w, cuda=False)
        assert real.peak_bytes == fake.tensor_peak_bytes, mode
        acts[mode] = fake.tensor_components["activations"]
    assert acts["full"] < acts["selective-op"] < acts["selective"]
